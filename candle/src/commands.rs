//! The subcommands: `validate` checks a merged model directory with Candle, `quantize` exports it
//! to GGUF and checks the file it wrote. Each returns a `Report`, never an error: failures are
//! recorded in the report, which decides the exit status.

use crate::config::LlamaConfig;
use crate::gguf::{self, Recipe};
use crate::model::{max_abs_diff, non_finite_positions, Llama};
use crate::perplexity::{perplexity, Heldout, Perplexity};
use crate::report::{finite, Command, OutputFile, PerplexityReport, QuantizationReport, Report};
use crate::tokenizer::ModelTokenizer;
use crate::weights::{check_weights, read_safetensors, HfWeights};
use anyhow::{anyhow, bail, ensure, Context, Result};
use clap::Args;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Run when no `--prompt` is given: plain text that any byte-level BPE can encode.
const DEFAULT_PROMPT: &str = "The quick brown fox jumps over the lazy dog.";
/// Positions of the GGUF round-trip probe (enough to exercise attention, cheap to run).
const PROBE_TOKENS: usize = 32;

#[derive(Debug, Clone, Args)]
pub struct ValidateArgs {
    /// Merged model directory: config.json, model.safetensors, tokenizer.json
    #[arg(long)]
    pub model: PathBuf,
    /// Text whose logits must be finite at every position (repeatable; a default prompt if none)
    #[arg(long = "prompt")]
    pub prompts: Vec<String>,
    /// JSON file {"sequences": [[token ids]...]} to compute held-out perplexity on
    #[arg(long)]
    pub heldout_tokens: Option<PathBuf>,
    /// Perplexity measured by PyTorch on the same sequences, to compare against
    #[arg(long, requires = "heldout_tokens")]
    pub reference_perplexity: Option<f64>,
    /// Largest accepted |candle - reference| / reference
    #[arg(long, default_value_t = 0.01)]
    pub tolerance: f64,
    /// Largest accepted held-out perplexity, absolute (`check_perplexity_threshold`)
    #[arg(long, requires = "heldout_tokens")]
    pub max_perplexity: Option<f64>,
    /// JSON file {"sequences": [[token ids]...]} of general text: capability retention
    #[arg(long)]
    pub general_tokens: Option<PathBuf>,
    /// Perplexity measured by PyTorch on the general text, to compare against
    #[arg(long, requires = "general_tokens")]
    pub general_reference_perplexity: Option<f64>,
    /// Largest accepted perplexity on the general text, absolute
    #[arg(long, requires = "general_tokens")]
    pub max_general_perplexity: Option<f64>,
    /// Print the report as one JSON object on stdout
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct QuantizeArgs {
    /// Merged model directory: config.json, model.safetensors, tokenizer.json
    #[arg(long)]
    pub model: PathBuf,
    /// GGUF file to write (replaced atomically)
    #[arg(long)]
    pub out: PathBuf,
    /// Tensor types: q8_0, q4_k_m (llama.cpp's mixture), q6_k, f16 or f32; norms stay f32
    #[arg(long, value_enum, default_value_t = Recipe::Q8_0)]
    pub dtype: Recipe,
    /// JSON file {"sequences": [[token ids]...]} to compare quantized and f32 perplexity on
    #[arg(long)]
    pub heldout_tokens: Option<PathBuf>,
    /// Largest accepted |ppl(gguf) - ppl(f32)| / ppl(f32) [default: f32 1e-4, f16 0.005, q8_0 0.02, q6_k 0.05, q4_k_m 0.15]
    #[arg(long)]
    pub perplexity_tolerance: Option<f64>,
    /// Largest accepted held-out perplexity of the GGUF itself, absolute
    #[arg(long, requires = "heldout_tokens")]
    pub max_perplexity: Option<f64>,
    /// Print the report as one JSON object on stdout
    #[arg(long)]
    pub json: bool,
}

pub fn run_validate(args: &ValidateArgs) -> Report {
    let mut report = Report::new(Command::Validate, &args.model.display().to_string());
    let outcome = validate(args, &mut report);
    report.finish(outcome)
}

pub fn run_quantize(args: &QuantizeArgs) -> Report {
    let mut report = Report::new(Command::Quantize, &args.model.display().to_string());
    let outcome = quantize(args, &mut report);
    report.finish(outcome)
}

fn validate(args: &ValidateArgs, report: &mut Report) -> Result<()> {
    ensure!(
        args.tolerance.is_finite() && args.tolerance >= 0.0,
        "--tolerance {} must be a non-negative number",
        args.tolerance
    );
    for (flag, value) in [
        ("--reference-perplexity", args.reference_perplexity),
        ("--max-perplexity", args.max_perplexity),
        (
            "--general-reference-perplexity",
            args.general_reference_perplexity,
        ),
        ("--max-general-perplexity", args.max_general_perplexity),
    ] {
        positive(flag, value)?;
    }
    let heldout = args
        .heldout_tokens
        .as_deref()
        .map(Heldout::from_file)
        .transpose()?;
    let general = args
        .general_tokens
        .as_deref()
        .map(Heldout::from_file)
        .transpose()?;
    let dir = load_model_dir(&args.model, report)?;
    let model = Llama::from_hf(&dir.cfg, &dir.weights)?;

    let prompts: Vec<&str> = if args.prompts.is_empty() {
        vec![DEFAULT_PROMPT]
    } else {
        args.prompts.iter().map(String::as_str).collect()
    };
    let finite_logits = check_finite_logits(&model, &dir, &prompts);
    record(report, "finite_logits", finite_logits);

    if let Some(heldout) = heldout {
        let ppl = fail_on_err(report, "perplexity_agreement", perplexity(&model, &heldout))?;
        let reference = args.reference_perplexity.map(|r| ("reference", r));
        report.perplexity = compare_perplexity(
            report,
            "perplexity_agreement",
            ("candle", ppl),
            reference,
            args.tolerance,
        );
        let what = if heldout.targets.is_some() {
            "target"
        } else {
            "held-out"
        };
        check_threshold(
            report,
            "perplexity_threshold",
            ppl,
            what,
            args.max_perplexity,
        );
        set_threshold(report.perplexity.as_mut(), args.max_perplexity);
    }
    if let Some(general) = general {
        let check = "general_perplexity_agreement";
        let ppl = fail_on_err(report, check, perplexity(&model, &general))?;
        let reference = args.general_reference_perplexity.map(|r| ("reference", r));
        report.general_perplexity =
            compare_perplexity(report, check, ("candle", ppl), reference, args.tolerance);
        let max = args.max_general_perplexity;
        check_threshold(
            report,
            "general_perplexity_threshold",
            ppl,
            "general-text",
            max,
        );
        set_threshold(report.general_perplexity.as_mut(), max);
    }
    Ok(())
}

fn positive(flag: &str, value: Option<f64>) -> Result<()> {
    if let Some(v) = value {
        ensure!(
            v.is_finite() && v > 0.0,
            "{flag} {v} must be a positive number"
        );
    }
    Ok(())
}

/// `check_perplexity_threshold`: an absolute bound, so a model that merely agrees with PyTorch
/// on a bad number (shuffled weights, a tokenizer that is not the model's) still fails.
fn check_threshold(
    report: &mut Report,
    check: &str,
    ppl: Perplexity,
    what: &str,
    max: Option<f64>,
) {
    let Some(max) = max else { return };
    let ok = ppl.value.is_finite() && ppl.value <= max;
    let detail = format!(
        "perplexity {:.4} on {} {what} tokens {} threshold {max:.4}",
        ppl.value,
        ppl.num_tokens,
        if ok { "<=" } else { ">" }
    );
    report.check(check, ok, detail);
}

fn set_threshold(perplexity: Option<&mut PerplexityReport>, max: Option<f64>) {
    if let Some(p) = perplexity {
        p.threshold = max;
    }
}

fn quantize(args: &QuantizeArgs, report: &mut Report) -> Result<()> {
    let recipe = args.dtype;
    let tolerance = args
        .perplexity_tolerance
        .unwrap_or(recipe.default_perplexity_tolerance());
    ensure!(
        tolerance.is_finite() && tolerance >= 0.0,
        "--perplexity-tolerance {tolerance} must be a non-negative number"
    );
    positive("--max-perplexity", args.max_perplexity)?;
    let heldout = args
        .heldout_tokens
        .as_deref()
        .map(Heldout::from_file)
        .transpose()?;
    let dir = load_model_dir(&args.model, report)?;

    let written = export(args, &dir);
    let tensors = checked(report, "quantize", written)?;
    let (sha256, size_bytes) = gguf::sha256_file(&args.out)?;
    report.outputs.push(OutputFile {
        path: absolute(&args.out),
        size_bytes,
        sha256,
    });
    report.quantization = Some(QuantizationReport {
        dtype: recipe.name().into(),
        tensors,
        perplexity: None,
    });

    let f32_model = Llama::from_hf(&dir.cfg, &dir.weights)?;
    let probe = match &heldout {
        Some(h) => h.sequences[0].iter().take(PROBE_TOKENS).copied().collect(),
        None => dir.tokenizer.encode(DEFAULT_PROMPT)?,
    };
    let roundtrip = check_roundtrip(&args.out, &dir.cfg, &f32_model, &probe, tensors);
    let gguf_model = checked(report, "gguf_roundtrip", roundtrip)?;

    if let Some(heldout) = heldout {
        let compared = perplexity(&f32_model, &heldout)
            .and_then(|f| Ok((f, perplexity(&gguf_model, &heldout)?)));
        let (f32_ppl, q_ppl) = fail_on_err(report, "quantized_perplexity", compared)?;
        // The GGUF is the artifact under test here, so its perplexity is the measured one and the
        // f32 model's is the reference it is held to.
        let measured = (recipe.name(), q_ppl);
        report.perplexity = compare_perplexity(
            report,
            "quantized_perplexity",
            measured,
            Some(("f32", f32_ppl.value)),
            tolerance,
        );
        let what = if heldout.targets.is_some() {
            "target"
        } else {
            "held-out"
        };
        check_threshold(
            report,
            "gguf_perplexity_threshold",
            q_ppl,
            what,
            args.max_perplexity,
        );
        set_threshold(report.perplexity.as_mut(), args.max_perplexity);
        if let Some(q) = report.quantization.as_mut() {
            q.perplexity = finite(q_ppl.value);
        }
    }
    Ok(())
}

/// A model directory, loaded and checked: the `config` and `load` checks.
struct ModelDir {
    cfg: LlamaConfig,
    weights: HfWeights,
    tokenizer: ModelTokenizer,
}

fn load_model_dir(dir: &Path, report: &mut Report) -> Result<ModelDir> {
    if !dir.is_dir() {
        let err = anyhow!(
            "model directory {} does not exist or is not a directory",
            dir.display()
        );
        report.check("config", false, format!("{err:#}"));
        return Err(err);
    }
    let cfg = LlamaConfig::from_file(&dir.join("config.json")).map(|c| {
        let s = c.summary();
        (c, s)
    });
    let cfg = checked(report, "config", cfg)?;
    let loaded = (|| {
        let (weights, summary) = check_weights(&cfg, read_weights(dir)?)?;
        let tokenizer = ModelTokenizer::from_file(&dir.join("tokenizer.json"))?;
        let n = tokenizer.check_fits(cfg.vocab_size)?;
        let detail = format!("{}; tokenizer.json with {n} tokens", summary.describe());
        Ok(((weights, tokenizer), detail))
    })();
    let (weights, tokenizer) = checked(report, "load", loaded)?;
    Ok(ModelDir {
        cfg,
        weights,
        tokenizer,
    })
}

/// `model.safetensors`, or the shards listed in `model.safetensors.index.json`.
fn read_weights(dir: &Path) -> Result<HashMap<String, candle_core::Tensor>> {
    let single = dir.join("model.safetensors");
    let index = dir.join("model.safetensors.index.json");
    if single.exists() || !index.exists() {
        return read_safetensors(&single);
    }
    let text = std::fs::read_to_string(&index)
        .with_context(|| format!("cannot read {}", index.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", index.display()))?;
    let map = value["weight_map"]
        .as_object()
        .ok_or_else(|| anyhow!("{}: missing `weight_map`", index.display()))?;
    let shards: BTreeSet<&str> = map.values().filter_map(|v| v.as_str()).collect();
    let mut all = HashMap::new();
    for shard in shards {
        all.extend(read_safetensors(&dir.join(shard))?);
    }
    Ok(all)
}

fn check_finite_logits(model: &Llama, dir: &ModelDir, prompts: &[&str]) -> Result<(bool, String)> {
    let mut tokens = 0;
    let mut failures = Vec::new();
    for (i, prompt) in prompts.iter().enumerate() {
        let ids = dir.tokenizer.encode(prompt)?;
        ensure!(
            !ids.is_empty(),
            "prompt {i} ({prompt:?}) tokenizes to no tokens"
        );
        let logits = model
            .forward(&ids)
            .with_context(|| format!("prompt {i} ({prompt:?})"))?;
        let bad = non_finite_positions(&logits)?;
        if !bad.is_empty() {
            failures.push(format!(
                "prompt {i} ({prompt:?}): non-finite logits at positions {bad:?} of {}",
                ids.len()
            ));
        }
        tokens += ids.len();
    }
    if failures.is_empty() {
        return Ok((
            true,
            format!(
                "{} prompt(s), {tokens} tokens: logits finite at every position",
                prompts.len()
            ),
        ));
    }
    let culprits = dir.weights.non_finite_tensors()?;
    let mut detail = failures.join("; ");
    if !culprits.is_empty() {
        detail.push_str(&format!(
            "; non-finite values in weights: {}",
            culprits.join(", ")
        ));
    }
    Ok((false, detail))
}

/// Plans, quantizes and writes the GGUF; returns the number of tensors written.
fn export(args: &QuantizeArgs, dir: &ModelDir) -> Result<(usize, String)> {
    let cfg = &dir.cfg;
    let plan = gguf::plan(cfg, args.dtype)?;
    let vocab = dir
        .tokenizer
        .gguf_vocab(cfg.vocab_size, cfg.bos_token_id, cfg.eos_token_id)?;
    let name = model_name(&args.model);
    eprintln!(
        "hanzo-ml-candle: quantizing {} tensors as {}",
        plan.len(),
        args.dtype.name()
    );
    let tensors = gguf::quantize(&dir.weights, &plan)?;
    gguf::write_atomically(
        &args.out,
        &gguf::metadata(cfg, &vocab, &name, args.dtype),
        &tensors,
    )?;
    let types = gguf::type_counts(plan.iter().map(|p| &p.dtype));
    Ok((
        tensors.len(),
        format!(
            "{} tensors ({types}) written to {}",
            tensors.len(),
            args.out.display()
        ),
    ))
}

/// Reads the GGUF back, compares its metadata with the source config and runs it on `probe`.
fn check_roundtrip(
    path: &Path,
    cfg: &LlamaConfig,
    f32_model: &Llama,
    probe: &[u32],
    tensors: usize,
) -> Result<(Llama, String)> {
    let gguf = gguf::load(path)?;
    let read_back = &gguf.model.cfg;
    // Token ids are not compared: GGUF carries them only when the config names them.
    let same_shape = LlamaConfig {
        bos_token_id: cfg.bos_token_id,
        eos_token_id: cfg.eos_token_id,
        pad_token_id: cfg.pad_token_id,
        ..read_back.clone()
    };
    if same_shape != gguf::as_stored(cfg) {
        bail!(
            "GGUF metadata describes {} but the source model is {}",
            read_back.summary(),
            cfg.summary()
        );
    }
    ensure!(
        gguf.tensor_types.len() == tensors,
        "GGUF holds {} tensors, {tensors} were written",
        gguf.tensor_types.len()
    );
    let logits = gguf.model.forward(probe).context("GGUF model forward")?;
    let bad = non_finite_positions(&logits)?;
    ensure!(
        bad.is_empty(),
        "GGUF model logits are non-finite at positions {bad:?} of the {}-token probe",
        probe.len()
    );
    let diff = max_abs_diff(&logits, &f32_model.forward(probe)?)?;
    let detail = format!(
        "{} tensors and llama metadata read back; logits finite on a {}-token probe, max |logit - f32 logit| = {diff:.4}",
        tensors,
        probe.len()
    );
    Ok((gguf.model, detail))
}

/// Checks a measured perplexity against a reference one (when there is one); returns both for
/// the report.
fn compare_perplexity(
    report: &mut Report,
    check: &str,
    (label, ppl): (&str, Perplexity),
    reference: Option<(&str, f64)>,
    tolerance: f64,
) -> Option<PerplexityReport> {
    let rel = reference.map(|(_, r)| (ppl.value - r).abs() / r);
    let ok = ppl.value.is_finite() && rel.is_none_or(|d| d <= tolerance);
    let detail = match (reference, rel) {
        (Some((name, r)), Some(d)) => format!(
            "{label} {:.6} vs {name} {r:.6} over {} tokens: relative diff {d:.3e} {} tolerance {tolerance:.3e}",
            ppl.value,
            ppl.num_tokens,
            if d <= tolerance { "<=" } else { ">" }
        ),
        _ => format!("{label} {:.6} over {} tokens (no reference given)", ppl.value, ppl.num_tokens),
    };
    report.check(check, ok, detail);
    finite(ppl.value).map(|candle| PerplexityReport {
        candle,
        reference: reference.and_then(|(_, r)| finite(r)),
        relative_diff: rel.and_then(finite),
        tolerance,
        threshold: None,
        num_tokens: ppl.num_tokens,
    })
}

/// Records a check from a step that yields (ok, detail); an error fails the check.
fn record(report: &mut Report, name: &str, outcome: Result<(bool, String)>) {
    match outcome {
        Ok((ok, detail)) => report.check(name, ok, detail),
        Err(e) => report.check(name, false, format!("{e:#}")),
    }
}

/// Records a fatal step as a check: passes with its detail, or fails and stops the command.
fn checked<T>(report: &mut Report, name: &str, outcome: Result<(T, String)>) -> Result<T> {
    let (value, detail) = fail_on_err(report, name, outcome)?;
    report.check(name, true, detail);
    Ok(value)
}

/// Passes a step's value through; an error fails check `name` and stops the command.
fn fail_on_err<T>(report: &mut Report, name: &str, outcome: Result<T>) -> Result<T> {
    outcome.inspect_err(|e| report.check(name, false, format!("{e:#}")))
}

/// `general.name`: the model directory's name.
fn model_name(dir: &Path) -> String {
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    abs.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into())
}

fn absolute(path: &Path) -> String {
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::tests::tiny_tokenizer_json;
    use crate::weights::tests::{random_weights, tiny_config};
    use candle_core::{Device, Tensor};

    fn model_dir(poison: Option<&str>) -> ModelDir {
        let cfg = tiny_config();
        let mut raw = random_weights(&cfg, 2);
        if let Some(name) = poison {
            let t = &raw[name];
            let mut values = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            values[3] = f32::NAN;
            raw.insert(
                name.into(),
                Tensor::from_vec(values, t.dims(), &Device::Cpu).unwrap(),
            );
        }
        let (weights, _) = check_weights(&cfg, raw).unwrap();
        let tokenizer = ModelTokenizer::from_json_str(&tiny_tokenizer_json().to_string()).unwrap();
        ModelDir {
            cfg,
            weights,
            tokenizer,
        }
    }

    #[test]
    fn finite_weights_give_finite_logits() {
        let dir = model_dir(None);
        let model = Llama::from_hf(&dir.cfg, &dir.weights).unwrap();
        let (ok, detail) = check_finite_logits(&model, &dir, &["ab a", "cab"]).unwrap();
        assert!(ok, "{detail}");
    }

    #[test]
    fn a_nan_weight_fails_finite_logits_and_is_named() {
        let dir = model_dir(Some("model.layers.1.mlp.up_proj.weight"));
        let model = Llama::from_hf(&dir.cfg, &dir.weights).unwrap();
        let (ok, detail) = check_finite_logits(&model, &dir, &["ab a"]).unwrap();
        assert!(!ok);
        assert!(
            detail.contains("prompt 0 (\"ab a\"): non-finite logits at positions [0, 1, 2] of 3"),
            "{detail}"
        );
        assert!(
            detail.contains("non-finite values in weights: model.layers.1.mlp.up_proj.weight"),
            "{detail}"
        );
    }

    #[test]
    fn a_failed_check_fails_the_report_and_names_the_check() {
        let mut report = Report::new(Command::Validate, "m");
        report.check("config", true, "fine");
        report.check("finite_logits", false, "NaN");
        let report = report.finish(Ok(()));
        assert!(!report.ok);
        assert_eq!(
            report.error.as_deref(),
            Some("failed checks: finite_logits")
        );
    }
}
