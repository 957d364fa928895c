//! `config.json` of a merged `LlamaForCausalLM`, as transformers 5 `save_pretrained` writes it.
//!
//! Parsed by hand from a `serde_json::Value` rather than derived, so that every error names the
//! offending field, and so that transformers 5's `rope_parameters` and the older top-level
//! `rope_theta` are both understood (a silent fallback to theta 10000 would shift every logit).

use anyhow::{anyhow, bail, ensure, Context, Result};
use serde_json::{Map, Value};
use std::path::Path;

/// Rope theta that transformers uses when a config names none.
const DEFAULT_ROPE_THETA: f64 = 10_000.0;
/// transformers' `LlamaConfig` default for `max_position_embeddings`.
const DEFAULT_MAX_POSITIONS: usize = 2048;

#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_id: Option<u32>,
    pub pad_token_id: Option<u32>,
}

impl LlamaConfig {
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Self::from_json_str(&text)
    }

    pub fn from_json_str(text: &str) -> Result<Self> {
        let value: Value = serde_json::from_str(text).context("config.json is not valid JSON")?;
        let obj = value
            .as_object()
            .ok_or_else(|| anyhow!("config.json is not a JSON object"))?;
        Self::from_object(obj).map_err(|e| anyhow!("config.json: {e:#}"))
    }

    fn from_object(obj: &Map<String, Value>) -> Result<Self> {
        check_architecture(obj)?;
        let hidden_size = required_usize(obj, "hidden_size")?;
        let num_attention_heads = required_usize(obj, "num_attention_heads")?;
        let num_key_value_heads =
            optional_usize(obj, "num_key_value_heads")?.unwrap_or(num_attention_heads);
        let head_dim = match optional_usize(obj, "head_dim")? {
            Some(d) => d,
            None => {
                ensure!(
                    hidden_size % num_attention_heads == 0,
                    "`hidden_size` = {hidden_size} is not divisible by `num_attention_heads` = \
                     {num_attention_heads} and no `head_dim` is given"
                );
                hidden_size / num_attention_heads
            }
        };
        ensure!(
            head_dim % 2 == 0,
            "`head_dim` = {head_dim} must be even for rotary embeddings"
        );
        ensure!(
            num_attention_heads % num_key_value_heads == 0,
            "`num_key_value_heads` = {num_key_value_heads} must divide `num_attention_heads` = \
             {num_attention_heads}"
        );
        let rms_norm_eps = required_f64(obj, "rms_norm_eps")?;
        ensure!(
            rms_norm_eps > 0.0,
            "`rms_norm_eps` = {rms_norm_eps} must be positive"
        );
        Ok(Self {
            hidden_size,
            intermediate_size: required_usize(obj, "intermediate_size")?,
            num_hidden_layers: required_usize(obj, "num_hidden_layers")?,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            vocab_size: required_usize(obj, "vocab_size")?,
            rms_norm_eps,
            rope_theta: rope_theta(obj)?,
            max_position_embeddings: optional_usize(obj, "max_position_embeddings")?
                .unwrap_or(DEFAULT_MAX_POSITIONS),
            tie_word_embeddings: optional_bool(obj, "tie_word_embeddings")?.unwrap_or(false),
            bos_token_id: token_id(obj, "bos_token_id")?,
            eos_token_id: token_id(obj, "eos_token_id")?,
            pad_token_id: token_id(obj, "pad_token_id")?,
        })
    }

    /// One-line description for reports.
    pub fn summary(&self) -> String {
        format!(
            "llama: {} layers, hidden {}, intermediate {}, {} heads x {} ({} kv), vocab {}, \
             rope theta {}, rms eps {:e}, tied embeddings {}",
            self.num_hidden_layers,
            self.hidden_size,
            self.intermediate_size,
            self.num_attention_heads,
            self.head_dim,
            self.num_key_value_heads,
            self.vocab_size,
            self.rope_theta,
            self.rms_norm_eps,
            self.tie_word_embeddings
        )
    }
}

/// Refuses configs whose forward pass differs from the plain Llama one implemented here.
fn check_architecture(obj: &Map<String, Value>) -> Result<()> {
    if let Some(t) = obj.get("model_type").and_then(Value::as_str) {
        ensure!(
            t == "llama",
            "`model_type` = {t:?} is not supported (only \"llama\")"
        );
    }
    if let Some(act) = obj.get("hidden_act").and_then(Value::as_str) {
        ensure!(
            act == "silu",
            "`hidden_act` = {act:?} is not supported (only \"silu\")"
        );
    }
    for field in ["attention_bias", "mlp_bias"] {
        ensure!(
            optional_bool(obj, field)? != Some(true),
            "`{field}` = true is not supported (Llama projections without bias only)"
        );
    }
    Ok(())
}

/// Rope theta from `rope_parameters.rope_theta` (transformers 5) or top-level `rope_theta`.
fn rope_theta(obj: &Map<String, Value>) -> Result<f64> {
    for field in ["rope_parameters", "rope_scaling"] {
        match obj.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::Object(p)) => {
                let kind = p
                    .get("rope_type")
                    .or_else(|| p.get("type"))
                    .and_then(Value::as_str);
                ensure!(
                    matches!(kind, None | Some("default")),
                    "`{field}.rope_type` = {:?} is not supported (only \"default\" rotary embeddings)",
                    kind.unwrap_or_default()
                );
            }
            Some(other) => bail!("`{field}` must be an object, got {other}"),
        }
    }
    let nested = match obj.get("rope_parameters") {
        Some(Value::Object(p)) => match p.get("rope_theta") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_f64().filter(|x| x.is_finite()).ok_or_else(|| {
                anyhow!("field `rope_parameters.rope_theta` must be a number, got {v}")
            })?),
        },
        _ => None,
    };
    let top = optional_f64(obj, "rope_theta")?;
    let theta = match (nested, top) {
        (Some(a), Some(b)) if a != b => {
            bail!("`rope_theta` = {b} disagrees with `rope_parameters.rope_theta` = {a}")
        }
        (Some(a), _) | (None, Some(a)) => a,
        (None, None) => DEFAULT_ROPE_THETA,
    };
    ensure!(theta > 0.0, "`rope_theta` = {theta} must be positive");
    Ok(theta)
}

fn required_usize(obj: &Map<String, Value>, field: &str) -> Result<usize> {
    optional_usize(obj, field)?.ok_or_else(|| anyhow!("missing required field `{field}`"))
}

fn optional_usize(obj: &Map<String, Value>, field: &str) -> Result<Option<usize>> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 => Ok(Some(n as usize)),
            _ => bail!("field `{field}` must be a positive integer, got {v}"),
        },
    }
}

fn required_f64(obj: &Map<String, Value>, field: &str) -> Result<f64> {
    optional_f64(obj, field)?.ok_or_else(|| anyhow!("missing required field `{field}`"))
}

fn optional_f64(obj: &Map<String, Value>, field: &str) -> Result<Option<f64>> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if x.is_finite() => Ok(Some(x)),
            _ => bail!("field `{field}` must be a number, got {v}"),
        },
    }
}

fn optional_bool(obj: &Map<String, Value>, field: &str) -> Result<Option<bool>> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => bail!("field `{field}` must be a boolean, got {v}"),
    }
}

/// A special-token id: an integer, or a list whose first entry is used (Llama 3 lists several eos ids).
fn token_id(obj: &Map<String, Value>, field: &str) -> Result<Option<u32>> {
    let v = match obj.get(field) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(items)) => match items.first() {
            None => return Ok(None),
            Some(first) => first,
        },
        Some(v) => v,
    };
    match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
        Some(id) => Ok(Some(id)),
        None => bail!("field `{field}` must be a token id, got {v}"),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn tiny_config_json() -> Value {
        json!({
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": 64,
            "intermediate_size": 96,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 50,
            "rms_norm_eps": 1e-5,
            "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
            "max_position_embeddings": 64,
            "tie_word_embeddings": false,
            "bos_token_id": 1,
            "eos_token_id": 2
        })
    }

    fn parse(v: &Value) -> Result<LlamaConfig> {
        LlamaConfig::from_json_str(&v.to_string())
    }

    #[test]
    fn a_complete_config_parses_with_derived_head_dim() {
        let cfg = parse(&tiny_config_json()).unwrap();
        assert_eq!(cfg.head_dim, 16);
        assert_eq!(cfg.num_key_value_heads, 2);
        assert_eq!(cfg.eos_token_id, Some(2));
    }

    #[test]
    fn a_missing_required_field_is_named() {
        for field in [
            "hidden_size",
            "num_hidden_layers",
            "vocab_size",
            "rms_norm_eps",
        ] {
            let mut v = tiny_config_json();
            v.as_object_mut().unwrap().remove(field);
            let err = format!("{:#}", parse(&v).unwrap_err());
            assert!(
                err.contains(&format!("missing required field `{field}`")),
                "{err}"
            );
        }
    }

    #[test]
    fn a_mistyped_field_is_named() {
        let mut v = tiny_config_json();
        v["intermediate_size"] = json!("wide");
        let err = format!("{:#}", parse(&v).unwrap_err());
        assert!(
            err.contains("`intermediate_size` must be a positive integer"),
            "{err}"
        );
    }

    #[test]
    fn rope_theta_is_read_from_rope_parameters_or_the_top_level() {
        let mut v = tiny_config_json();
        v["rope_parameters"]["rope_theta"] = json!(50000.0);
        assert_eq!(parse(&v).unwrap().rope_theta, 50000.0);

        let mut v = tiny_config_json();
        v.as_object_mut().unwrap().remove("rope_parameters");
        v["rope_theta"] = json!(500000.0);
        assert_eq!(parse(&v).unwrap().rope_theta, 500000.0);

        v["rope_parameters"] = json!({"rope_theta": 1000.0, "rope_type": "default"});
        let err = format!("{:#}", parse(&v).unwrap_err());
        assert!(
            err.contains("disagrees with `rope_parameters.rope_theta`"),
            "{err}"
        );
    }

    #[test]
    fn scaled_rope_is_refused_by_name() {
        let mut v = tiny_config_json();
        v["rope_parameters"]["rope_type"] = json!("llama3");
        let err = format!("{:#}", parse(&v).unwrap_err());
        assert!(
            err.contains("`rope_parameters.rope_type` = \"llama3\""),
            "{err}"
        );
    }

    #[test]
    fn kv_heads_must_divide_attention_heads() {
        let mut v = tiny_config_json();
        v["num_key_value_heads"] = json!(3);
        let err = format!("{:#}", parse(&v).unwrap_err());
        assert!(err.contains("`num_key_value_heads` = 3"), "{err}");
    }
}
