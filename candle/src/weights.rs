//! The tensors a merged `LlamaForCausalLM` checkpoint must hold, checked by name and shape before
//! anything is built from them, so a bad checkpoint fails with the tensor named instead of a panic
//! deep inside a matmul.

use crate::config::LlamaConfig;
use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// A tensor as the Hugging Face checkpoint names it, with the shape the config implies.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<usize>,
}

/// Weights keyed by their Hugging Face names, all float32 and shape-checked.
#[derive(Debug, Clone)]
pub struct HfWeights {
    tensors: HashMap<String, Tensor>,
}

impl HfWeights {
    pub fn get(&self, name: &str) -> Result<&Tensor> {
        self.tensors
            .get(name)
            .with_context(|| format!("tensor `{name}` is not loaded"))
    }

    /// Names of tensors whose values include NaN or infinity, for diagnosing non-finite logits.
    pub fn non_finite_tensors(&self) -> Result<Vec<String>> {
        let mut bad = Vec::new();
        for (name, t) in &self.tensors {
            let finite = t
                .flatten_all()?
                .to_vec1::<f32>()?
                .iter()
                .all(|x| x.is_finite());
            if !finite {
                bad.push(name.clone());
            }
        }
        bad.sort();
        Ok(bad)
    }
}

/// Every tensor the forward pass reads, in checkpoint order.
pub fn expected_tensors(cfg: &LlamaConfig) -> Vec<TensorSpec> {
    let (h, i, v) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
    let q_rows = cfg.num_attention_heads * cfg.head_dim;
    let kv_rows = cfg.num_key_value_heads * cfg.head_dim;
    let spec = |name: String, shape: &[usize]| TensorSpec {
        name,
        shape: shape.to_vec(),
    };

    let mut specs = vec![spec("model.embed_tokens.weight".into(), &[v, h])];
    for l in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{l}");
        specs.extend([
            spec(format!("{p}.input_layernorm.weight"), &[h]),
            spec(format!("{p}.self_attn.q_proj.weight"), &[q_rows, h]),
            spec(format!("{p}.self_attn.k_proj.weight"), &[kv_rows, h]),
            spec(format!("{p}.self_attn.v_proj.weight"), &[kv_rows, h]),
            spec(format!("{p}.self_attn.o_proj.weight"), &[h, q_rows]),
            spec(format!("{p}.post_attention_layernorm.weight"), &[h]),
            spec(format!("{p}.mlp.gate_proj.weight"), &[i, h]),
            spec(format!("{p}.mlp.up_proj.weight"), &[i, h]),
            spec(format!("{p}.mlp.down_proj.weight"), &[h, i]),
        ]);
    }
    specs.push(spec("model.norm.weight".into(), &[h]));
    if !cfg.tie_word_embeddings {
        specs.push(spec("lm_head.weight".into(), &[v, h]));
    }
    specs
}

/// Reads `model.safetensors` into memory.
pub fn read_safetensors(path: &Path) -> Result<HashMap<String, Tensor>> {
    candle_core::safetensors::load(path, &Device::Cpu)
        .with_context(|| format!("cannot read safetensors file {}", path.display()))
}

/// What `check_weights` found besides the expected tensors, for the `load` check's detail.
#[derive(Debug, Default)]
pub struct LoadSummary {
    pub tensors: usize,
    pub parameters: usize,
    pub unexpected: Vec<String>,
    pub converted_dtypes: BTreeMap<String, usize>,
}

impl LoadSummary {
    pub fn describe(&self) -> String {
        let mut s = format!("{} tensors, {} parameters", self.tensors, self.parameters);
        for (dtype, n) in &self.converted_dtypes {
            s.push_str(&format!("; {n} {dtype} tensors upcast to f32"));
        }
        if !self.unexpected.is_empty() {
            s.push_str(&format!(
                "; {} unexpected tensors ignored ({})",
                self.unexpected.len(),
                preview(&self.unexpected)
            ));
        }
        s
    }
}

/// Checks every expected tensor is present with its expected shape (all problems are listed, each
/// naming its tensor), and converts floating-point weights to f32.
pub fn check_weights(
    cfg: &LlamaConfig,
    mut raw: HashMap<String, Tensor>,
) -> Result<(HfWeights, LoadSummary)> {
    let specs = expected_tensors(cfg);
    let mut problems = Vec::new();
    let mut summary = LoadSummary::default();
    let mut tensors = HashMap::with_capacity(specs.len());
    for spec in &specs {
        let Some(t) = raw.remove(&spec.name) else {
            problems.push(format!(
                "missing tensor `{}` (expected shape {:?})",
                spec.name, spec.shape
            ));
            continue;
        };
        if t.dims() != spec.shape.as_slice() {
            problems.push(format!(
                "tensor `{}` has shape {:?}, expected {:?}",
                spec.name,
                t.dims(),
                spec.shape
            ));
            continue;
        }
        match t.dtype() {
            DType::F32 => {}
            DType::F16 | DType::BF16 | DType::F64 => {
                *summary
                    .converted_dtypes
                    .entry(format!("{:?}", t.dtype()))
                    .or_default() += 1;
            }
            other => {
                problems.push(format!(
                    "tensor `{}` has dtype {other:?}, expected a float",
                    spec.name
                ));
                continue;
            }
        }
        summary.parameters += t.elem_count();
        tensors.insert(spec.name.clone(), t.to_dtype(DType::F32)?);
    }
    if !problems.is_empty() {
        bail!(
            "{} problem(s) in model.safetensors: {}",
            problems.len(),
            problems.join("; ")
        );
    }
    summary.tensors = tensors.len();
    summary.unexpected = raw.into_keys().collect();
    summary.unexpected.sort();
    Ok((HfWeights { tensors }, summary))
}

fn preview(names: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut s = names
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        s.push_str(&format!(", ... {} more", names.len() - SHOWN));
    }
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::tests::tiny_config_json;

    /// Deterministic pseudo-random weights for `cfg` (small values, like a trained model's).
    pub(crate) fn random_weights(cfg: &LlamaConfig, seed: u64) -> HashMap<String, Tensor> {
        let mut state = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        expected_tensors(cfg)
            .into_iter()
            .map(|spec| {
                let n: usize = spec.shape.iter().product();
                let values: Vec<f32> = (0..n)
                    .map(|_| {
                        state = state
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let u = (state >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
                        if spec.shape.len() == 1 {
                            1.0 + 0.2 * (u - 0.5)
                        } else {
                            0.3 * (u - 0.5)
                        }
                    })
                    .collect();
                let t = Tensor::from_vec(values, spec.shape.as_slice(), &Device::Cpu).unwrap();
                (spec.name, t)
            })
            .collect()
    }

    pub(crate) fn tiny_config() -> LlamaConfig {
        LlamaConfig::from_json_str(&tiny_config_json().to_string()).unwrap()
    }

    #[test]
    fn complete_weights_pass_and_extra_tensors_are_reported() {
        let cfg = tiny_config();
        let mut raw = random_weights(&cfg, 1);
        raw.insert(
            "model.rotary_emb.inv_freq".into(),
            Tensor::zeros(8, DType::F32, &Device::Cpu).unwrap(),
        );
        let (_, summary) = check_weights(&cfg, raw).unwrap();
        assert_eq!(summary.tensors, 2 * 9 + 3);
        assert_eq!(
            summary.unexpected,
            vec!["model.rotary_emb.inv_freq".to_string()]
        );
    }

    #[test]
    fn a_missing_tensor_is_named() {
        let cfg = tiny_config();
        let mut raw = random_weights(&cfg, 1);
        raw.remove("model.layers.1.mlp.up_proj.weight");
        let err = format!("{:#}", check_weights(&cfg, raw).unwrap_err());
        assert!(
            err.contains("missing tensor `model.layers.1.mlp.up_proj.weight`"),
            "{err}"
        );
    }

    #[test]
    fn a_misshaped_tensor_is_named_with_both_shapes() {
        let cfg = tiny_config();
        let mut raw = random_weights(&cfg, 1);
        raw.insert(
            "model.layers.0.self_attn.k_proj.weight".into(),
            Tensor::zeros((64, 64), DType::F32, &Device::Cpu).unwrap(),
        );
        let err = format!("{:#}", check_weights(&cfg, raw).unwrap_err());
        assert!(
            err.contains("tensor `model.layers.0.self_attn.k_proj.weight` has shape [64, 64], expected [32, 64]"),
            "{err}"
        );
    }

    #[test]
    fn an_untied_model_needs_lm_head_and_a_tied_one_does_not() {
        let mut cfg = tiny_config();
        let mut raw = random_weights(&cfg, 1);
        raw.remove("lm_head.weight");
        let err = format!("{:#}", check_weights(&cfg, raw.clone()).unwrap_err());
        assert!(err.contains("missing tensor `lm_head.weight`"), "{err}");
        cfg.tie_word_embeddings = true;
        check_weights(&cfg, raw).unwrap();
    }
}
