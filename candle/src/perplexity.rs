//! Held-out perplexity, defined exactly as the PyTorch side computes it: each sequence alone (no
//! padding), one full causal forward in f32, token i (i >= 1) scored given tokens 0..i-1;
//! ppl = exp(sum of NLL / number of scored tokens), with the sums accumulated in f64.

use crate::model::Llama;
use anyhow::{anyhow, bail, Context, Result};
use candle_core::{Device, Tensor, D};
use candle_nn::ops::log_softmax;
use serde_json::Value;
use std::path::Path;

/// Token sequences read from `{"sequences": [[ids]...]}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Heldout {
    pub sequences: Vec<Vec<u32>>,
}

impl Heldout {
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read held-out tokens file {}", path.display()))?;
        Self::from_json_str(&text)
            .with_context(|| format!("held-out tokens file {}", path.display()))
    }

    pub fn from_json_str(text: &str) -> Result<Self> {
        let value: Value = serde_json::from_str(text).context("not valid JSON")?;
        let seqs = value
            .get("sequences")
            .ok_or_else(|| {
                anyhow!("missing field `sequences` (expected {{\"sequences\": [[token ids]...]}})")
            })?
            .as_array()
            .ok_or_else(|| anyhow!("field `sequences` must be an array of token-id arrays"))?;
        if seqs.is_empty() {
            bail!("field `sequences` is empty");
        }
        let sequences = seqs
            .iter()
            .enumerate()
            .map(|(i, seq)| parse_sequence(i, seq))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { sequences })
    }

    pub fn scored_tokens(&self) -> usize {
        self.sequences.iter().map(|s| s.len() - 1).sum()
    }
}

fn parse_sequence(i: usize, seq: &Value) -> Result<Vec<u32>> {
    let items = seq
        .as_array()
        .ok_or_else(|| anyhow!("`sequences[{i}]` is not an array"))?;
    if items.len() < 2 {
        bail!(
            "`sequences[{i}]` has {} token(s); at least 2 are needed to score one",
            items.len()
        );
    }
    items
        .iter()
        .enumerate()
        .map(|(j, v)| {
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| anyhow!("`sequences[{i}][{j}]` = {v} is not a token id"))
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Perplexity {
    pub value: f64,
    pub nll_sum: f64,
    pub num_tokens: usize,
}

/// Perplexity of `model` over `heldout` (see the module docs for the definition).
pub fn perplexity(model: &Llama, heldout: &Heldout) -> Result<Perplexity> {
    let mut nll_sum = 0.0f64;
    for (i, seq) in heldout.sequences.iter().enumerate() {
        nll_sum += sequence_nll(model, seq).with_context(|| format!("held-out sequence {i}"))?;
    }
    let num_tokens = heldout.scored_tokens();
    Ok(Perplexity {
        value: (nll_sum / num_tokens as f64).exp(),
        nll_sum,
        num_tokens,
    })
}

/// Sum over positions 1..n-1 of -log p(token | prefix).
fn sequence_nll(model: &Llama, seq: &[u32]) -> Result<f64> {
    let n = seq.len();
    let logits = model.forward(seq)?; // [n, V]
    let logp = log_softmax(&logits.narrow(0, 0, n - 1)?, D::Minus1)?; // [n-1, V]
    let targets = Tensor::new(&seq[1..], &Device::Cpu)?.unsqueeze(1)?; // [n-1, 1]
    let picked = logp.gather(&targets, 1)?.squeeze(1)?.to_vec1::<f32>()?;
    Ok(-picked.iter().map(|&x| x as f64).sum::<f64>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::check_weights;
    use crate::weights::tests::{random_weights, tiny_config};

    fn err_of(text: &str) -> String {
        format!("{:#}", Heldout::from_json_str(text).unwrap_err())
    }

    #[test]
    fn malformed_heldout_files_are_rejected_with_the_reason() {
        assert!(err_of("[[1, 2, 3]").contains("not valid JSON"));
        assert!(err_of(r#"{"seqs": [[1, 2]]}"#).contains("missing field `sequences`"));
        assert!(err_of(r#"{"sequences": []}"#).contains("`sequences` is empty"));
        assert!(err_of(r#"{"sequences": [[1, 2], [7]]}"#).contains("`sequences[1]` has 1 token(s)"));
        assert!(err_of(r#"{"sequences": [[1, -2, 3]]}"#)
            .contains("`sequences[0][1]` = -2 is not a token id"));
        assert!(
            err_of(r#"{"sequences": [[1, 2], "3 4"]}"#).contains("`sequences[1]` is not an array")
        );
    }

    #[test]
    fn perplexity_averages_nll_over_scored_tokens() {
        let cfg = tiny_config();
        let (w, _) = check_weights(&cfg, random_weights(&cfg, 3)).unwrap();
        let model = Llama::from_hf(&cfg, &w).unwrap();
        let a = Heldout {
            sequences: vec![vec![1, 5, 9, 2]],
        };
        let b = Heldout {
            sequences: vec![vec![1, 7, 3]],
        };
        let both = Heldout {
            sequences: vec![vec![1, 5, 9, 2], vec![1, 7, 3]],
        };
        let (pa, pb, pboth) = (
            perplexity(&model, &a).unwrap(),
            perplexity(&model, &b).unwrap(),
            perplexity(&model, &both).unwrap(),
        );
        assert_eq!(pboth.num_tokens, 5);
        let expected = ((pa.nll_sum + pb.nll_sum) / 5.0).exp();
        assert!((pboth.value - expected).abs() < 1e-9 * expected);
        assert!(pboth.value > 1.0 && pboth.value.is_finite());
    }

    #[test]
    fn an_out_of_vocabulary_heldout_token_names_its_sequence() {
        let cfg = tiny_config();
        let (w, _) = check_weights(&cfg, random_weights(&cfg, 3)).unwrap();
        let model = Llama::from_hf(&cfg, &w).unwrap();
        let bad = Heldout {
            sequences: vec![vec![1, 2], vec![1, 999]],
        };
        let err = format!("{:#}", perplexity(&model, &bad).unwrap_err());
        assert!(
            err.contains("held-out sequence 1") && err.contains("token id 999"),
            "{err}"
        );
    }
}
