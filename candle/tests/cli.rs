//! The built `hanzo-ml-candle` binary end to end on the tiny fixture: reports match the contract,
//! GGUF files load back with llama.cpp names and metadata, and broken inputs exit non-zero.

mod common;

use candle_core::quantized::{gguf_file, GgmlDType};
use common::{fixture_dir, read_json, run_cli};
use hanzo_ml_candle::gguf;
use std::collections::BTreeSet;
use std::path::Path;

fn fixture() -> String {
    fixture_dir().display().to_string()
}

fn heldout() -> String {
    fixture_dir().join("heldout.json").display().to_string()
}

/// A copy of the fixture with `edit` applied, in a temporary directory.
fn broken_fixture(edit: impl FnOnce(&Path)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(fixture_dir().join(f), dir.path().join(f)).unwrap();
    }
    edit(dir.path());
    dir
}

#[test]
fn validate_passes_on_the_fixture_against_the_pytorch_perplexity() {
    let reference = read_json(&fixture_dir().join("reference.json"))["perplexity"]
        .as_f64()
        .unwrap();
    let run = run_cli(&[
        "validate",
        "--model",
        &fixture(),
        "--prompt",
        "The bridge is white.",
        "--prompt",
        "Trains stop twice a day.",
        "--heldout-tokens",
        &heldout(),
        "--reference-perplexity",
        &reference.to_string(),
        "--tolerance",
        "1e-4",
        "--json",
    ]);
    let r = &run.report;
    assert_eq!(run.code, 0, "{r:#}\n{}", run.stderr);
    assert_eq!(r["ok"], true);
    let names: Vec<&str> = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["config", "load", "finite_logits", "perplexity_agreement"]
    );
    assert!(r["perplexity"]["relative_diff"].as_f64().unwrap() < 1e-4);
    assert_eq!(r["perplexity"]["num_tokens"], 144);
    assert!(r["error"].is_null());
}

#[test]
fn validate_fails_when_the_reference_perplexity_disagrees() {
    let run = run_cli(&[
        "validate",
        "--model",
        &fixture(),
        "--heldout-tokens",
        &heldout(),
        "--reference-perplexity",
        "30",
        "--json",
    ]);
    assert_eq!(run.code, 1);
    assert_eq!(run.report["ok"], false);
    assert_eq!(run.report["error"], "failed checks: perplexity_agreement");
    assert!(run.report["perplexity"]["relative_diff"].as_f64().unwrap() > 0.2);
}

#[test]
fn quantize_q8_0_writes_a_gguf_that_loads_with_llama_cpp_names_and_metadata() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("tiny-q8_0.gguf");
    let run = run_cli(&[
        "quantize",
        "--model",
        &fixture(),
        "--out",
        out.to_str().unwrap(),
        "--dtype",
        "q8_0",
        "--heldout-tokens",
        &heldout(),
        "--json",
    ]);
    let r = &run.report;
    assert_eq!(run.code, 0, "{r:#}\n{}", run.stderr);
    let names: Vec<&str> = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "config",
            "load",
            "quantize",
            "gguf_roundtrip",
            "quantized_perplexity"
        ]
    );
    assert_eq!(r["quantization"]["dtype"], "q8_0");
    assert_eq!(r["quantization"]["tensors"], 20);
    // Q8_0 stays within 2% of the f32 perplexity.
    assert!(
        r["perplexity"]["relative_diff"].as_f64().unwrap() < 0.02,
        "{r:#}"
    );

    let output = &r["outputs"][0];
    let (sha, size) = gguf::sha256_file(&out).unwrap();
    assert_eq!(output["path"], out.to_str().unwrap());
    assert_eq!(output["sha256"], sha.as_str());
    assert_eq!(output["size_bytes"].as_u64().unwrap(), size);
    assert_no_temp_files(out_dir.path());
    // GGUF v3, as llama.cpp writes it: the header is magic "GGUF" then version 3 (little-endian).
    let header = std::fs::read(&out).unwrap();
    assert_eq!(&header[..4], b"GGUF");
    assert_eq!(u32::from_le_bytes(header[4..8].try_into().unwrap()), 3);

    let loaded = gguf::load(&out).unwrap();
    let names: BTreeSet<&str> = loaded.tensor_types.keys().map(String::as_str).collect();
    assert_eq!(names, expected_tensor_names());
    assert!(loaded.tensor_types.iter().all(|(n, t)| *t
        == if n.ends_with("norm.weight") {
            GgmlDType::F32
        } else {
            GgmlDType::Q8_0
        }));
    assert_llama_metadata(&loaded.metadata);
}

#[test]
fn quantize_q4_k_m_follows_llama_cpp_mixture() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("tiny-q4_k_m.gguf");
    let run = run_cli(&[
        "quantize",
        "--model",
        &fixture(),
        "--out",
        out.to_str().unwrap(),
        "--dtype",
        "q4_k_m",
        "--heldout-tokens",
        &heldout(),
        "--json",
    ]);
    assert_eq!(run.code, 0, "{:#}\n{}", run.report, run.stderr);
    assert!(run.report["quantization"]["perplexity"]
        .as_f64()
        .unwrap()
        .is_finite());

    let loaded = gguf::load(&out).unwrap();
    let t = &loaded.tensor_types;
    assert_eq!(
        t.keys().map(String::as_str).collect::<BTreeSet<_>>(),
        expected_tensor_names()
    );
    // Tied embeddings: token_embd doubles as the output, which Q4_K_M keeps at Q6_K.
    assert_eq!(t["token_embd.weight"], GgmlDType::Q6K);
    // With 2 layers, llama.cpp gives more bits to attn_v and ffn_down of layer 1 only.
    assert_eq!(t["blk.1.attn_v.weight"], GgmlDType::Q6K);
    assert_eq!(t["blk.1.ffn_down.weight"], GgmlDType::Q6K);
    assert_eq!(t["blk.0.attn_v.weight"], GgmlDType::Q4K);
    assert_eq!(t["blk.0.ffn_down.weight"], GgmlDType::Q4K);
    assert_eq!(t["blk.0.attn_q.weight"], GgmlDType::Q4K);
    assert_eq!(t["output_norm.weight"], GgmlDType::F32);
    assert_llama_metadata(&loaded.metadata);
    assert_eq!(loaded.metadata["general.file_type"].to_u32().unwrap(), 15);
}

#[test]
fn validate_reports_a_missing_config_field_and_exits_non_zero() {
    let dir = broken_fixture(|d| {
        let mut cfg = read_json(&d.join("config.json"));
        cfg.as_object_mut().unwrap().remove("num_hidden_layers");
        std::fs::write(d.join("config.json"), cfg.to_string()).unwrap();
    });
    let run = run_cli(&[
        "validate",
        "--model",
        dir.path().to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(run.code, 1);
    assert_eq!(run.report["ok"], false);
    assert_eq!(run.report["checks"][0]["name"], "config");
    assert_eq!(run.report["checks"][0]["ok"], false);
    assert!(
        run.report["error"]
            .as_str()
            .unwrap()
            .contains("missing required field `num_hidden_layers`"),
        "{:#}",
        run.report
    );
}

#[test]
fn validate_names_a_missing_tensor_and_exits_non_zero() {
    let dir = broken_fixture(|d| {
        let path = d.join("model.safetensors");
        let mut tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu).unwrap();
        tensors.remove("model.layers.1.self_attn.v_proj.weight");
        candle_core::safetensors::save(&tensors, &path).unwrap();
    });
    let run = run_cli(&[
        "validate",
        "--model",
        dir.path().to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(run.code, 1);
    let load = &run.report["checks"][1];
    assert_eq!(
        (load["name"].as_str(), load["ok"].as_bool()),
        (Some("load"), Some(false))
    );
    assert!(load["detail"]
        .as_str()
        .unwrap()
        .contains("missing tensor `model.layers.1.self_attn.v_proj.weight`"));
}

#[test]
fn quantize_of_a_missing_directory_still_prints_a_failed_report() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("never.gguf");
    let run = run_cli(&[
        "quantize",
        "--model",
        "/nonexistent/model",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(run.code, 1);
    assert_eq!(run.report["command"], "quantize");
    assert!(run.report["error"]
        .as_str()
        .unwrap()
        .contains("/nonexistent/model"));
    assert!(!out.exists());
}

#[test]
fn bad_heldout_json_is_an_error_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("heldout.json");
    std::fs::write(&path, r#"{"sequences": [[1, 2, 3], [4]]}"#).unwrap();
    let run = run_cli(&[
        "validate",
        "--model",
        &fixture(),
        "--heldout-tokens",
        path.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(run.code, 1);
    assert!(
        run.report["error"]
            .as_str()
            .unwrap()
            .contains("`sequences[1]` has 1 token(s)"),
        "{:#}",
        run.report
    );
}

#[test]
fn a_usage_error_with_json_still_prints_a_report() {
    let run = run_cli(&[
        "quantize",
        "--model",
        &fixture(),
        "--dtype",
        "q3_k",
        "--json",
    ]);
    assert_eq!(run.code, 2);
    assert_eq!(run.report["ok"], false);
    assert_eq!(run.report["model_dir"], fixture().as_str());
}

fn expected_tensor_names() -> BTreeSet<&'static str> {
    let mut names = BTreeSet::from(["token_embd.weight", "output_norm.weight"]);
    for n in [
        "blk.0.attn_norm.weight",
        "blk.0.attn_q.weight",
        "blk.0.attn_k.weight",
        "blk.0.attn_v.weight",
        "blk.0.attn_output.weight",
        "blk.0.ffn_norm.weight",
        "blk.0.ffn_gate.weight",
        "blk.0.ffn_up.weight",
        "blk.0.ffn_down.weight",
        "blk.1.attn_norm.weight",
        "blk.1.attn_q.weight",
        "blk.1.attn_k.weight",
        "blk.1.attn_v.weight",
        "blk.1.attn_output.weight",
        "blk.1.ffn_norm.weight",
        "blk.1.ffn_gate.weight",
        "blk.1.ffn_up.weight",
        "blk.1.ffn_down.weight",
    ] {
        names.insert(n);
    }
    names // no output.weight: the fixture ties its embeddings, as llama.cpp's converter writes them
}

fn assert_llama_metadata(md: &std::collections::HashMap<String, gguf_file::Value>) {
    let u = |k: &str| md[k].to_u32().unwrap_or_else(|e| panic!("{k}: {e}"));
    let s = |k: &str| md[k].to_string().unwrap().clone();
    assert_eq!(s("general.architecture"), "llama");
    assert_eq!(s("general.name"), "tiny-llama");
    assert_eq!(u("llama.block_count"), 2);
    assert_eq!(u("llama.embedding_length"), 256);
    assert_eq!(u("llama.feed_forward_length"), 256);
    assert_eq!(u("llama.context_length"), 256);
    assert_eq!(u("llama.attention.head_count"), 8);
    assert_eq!(u("llama.attention.head_count_kv"), 1);
    assert_eq!(u("llama.rope.dimension_count"), 32);
    assert_eq!(u("llama.vocab_size"), 300);
    assert_eq!(md["llama.rope.freq_base"].to_f32().unwrap(), 50000.0);
    assert_eq!(
        md["llama.attention.layer_norm_rms_epsilon"]
            .to_f32()
            .unwrap(),
        1e-5
    );
    assert_eq!(s("tokenizer.ggml.model"), "gpt2");
    assert_eq!(s("tokenizer.ggml.pre"), "gpt-2");
    let tokens = md["tokenizer.ggml.tokens"].to_vec().unwrap();
    assert_eq!(tokens.len(), 300);
    assert_eq!(tokens[1].to_string().unwrap(), "<|bos|>");
    assert_eq!(
        md["tokenizer.ggml.token_type"].to_vec().unwrap()[1]
            .to_i32()
            .unwrap(),
        3
    );
    assert_eq!(md["tokenizer.ggml.merges"].to_vec().unwrap().len(), 41);
    assert_eq!(u("tokenizer.ggml.bos_token_id"), 1);
    assert_eq!(u("tokenizer.ggml.eos_token_id"), 2);
    assert!(md["tokenizer.ggml.add_bos_token"].to_bool().unwrap());
}

fn assert_no_temp_files(dir: &Path) {
    let leftovers: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "temporary files left behind: {leftovers:?}"
    );
}
