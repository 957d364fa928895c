//! Held-out perplexity, defined exactly as the PyTorch side computes it: each sequence alone (no
//! padding), one full causal forward in f32, token i (i >= 1) scored given tokens 0..i-1;
//! ppl = exp(sum of NLL / number of scored tokens), with the sums accumulated in f64.
//!
//! A file may carry `"target_mask": [[0|1...]...]`, one flag per token: only flagged tokens are
//! scored. The merge job flags the assistant turns, the tokens a fine-tune is trained to produce;
//! scoring the user turns too measures text the model never learned to write.

use crate::model::Llama;
use anyhow::{anyhow, bail, ensure, Context, Result};
use candle_core::{Device, Tensor, D};
use candle_nn::ops::log_softmax;
use serde_json::Value;
use std::path::Path;

/// Token sequences read from `{"sequences": [[ids]...], "target_mask"?: [[0|1...]...]}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Heldout {
    pub sequences: Vec<Vec<u32>>,
    /// Per token: scored or not; `None` scores every token after the first.
    pub targets: Option<Vec<Vec<bool>>>,
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
        let targets = match value.get("target_mask") {
            None | Some(Value::Null) => None,
            Some(masks) => Some(parse_masks(masks, &sequences)?),
        };
        let heldout = Self { sequences, targets };
        if heldout.scored_tokens() == 0 {
            bail!("`target_mask` flags no token after the first of any sequence: nothing to score");
        }
        Ok(heldout)
    }

    /// Whether token `j` of sequence `i` is scored (never the first: it has no prefix).
    pub fn is_scored(&self, i: usize, j: usize) -> bool {
        j >= 1 && self.targets.as_ref().is_none_or(|t| t[i][j])
    }

    pub fn scored_tokens(&self) -> usize {
        self.sequences
            .iter()
            .enumerate()
            .map(|(i, s)| (1..s.len()).filter(|&j| self.is_scored(i, j)).count())
            .sum()
    }
}

fn parse_masks(masks: &Value, sequences: &[Vec<u32>]) -> Result<Vec<Vec<bool>>> {
    let masks = masks
        .as_array()
        .ok_or_else(|| anyhow!("field `target_mask` must be an array of 0/1 arrays"))?;
    ensure!(
        masks.len() == sequences.len(),
        "`target_mask` has {} entries for {} sequences",
        masks.len(),
        sequences.len()
    );
    masks
        .iter()
        .zip(sequences)
        .enumerate()
        .map(|(i, (mask, seq))| {
            let flags = mask
                .as_array()
                .ok_or_else(|| anyhow!("`target_mask[{i}]` is not an array"))?;
            ensure!(
                flags.len() == seq.len(),
                "`target_mask[{i}]` has {} flags for {} tokens",
                flags.len(),
                seq.len()
            );
            flags
                .iter()
                .enumerate()
                .map(|(j, f)| match f.as_u64() {
                    Some(0) => Ok(false),
                    Some(1) => Ok(true),
                    _ => bail!("`target_mask[{i}][{j}]` = {f} is not 0 or 1"),
                })
                .collect()
        })
        .collect()
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
        let scored: Vec<bool> = (0..seq.len()).map(|j| heldout.is_scored(i, j)).collect();
        if !scored.iter().any(|&s| s) {
            continue;
        }
        nll_sum +=
            sequence_nll(model, seq, &scored).with_context(|| format!("held-out sequence {i}"))?;
    }
    let num_tokens = heldout.scored_tokens();
    Ok(Perplexity {
        value: (nll_sum / num_tokens as f64).exp(),
        nll_sum,
        num_tokens,
    })
}

/// Sum over the scored positions j (1..n-1) of -log p(token j | tokens 0..j-1).
fn sequence_nll(model: &Llama, seq: &[u32], scored: &[bool]) -> Result<f64> {
    let n = seq.len();
    let logits = model.forward(seq)?; // [n, V]
    let logp = log_softmax(&logits.narrow(0, 0, n - 1)?, D::Minus1)?; // [n-1, V]
    let targets = Tensor::new(&seq[1..], &Device::Cpu)?.unsqueeze(1)?; // [n-1, 1]
    let picked = logp.gather(&targets, 1)?.squeeze(1)?.to_vec1::<f32>()?; // picked[j-1]: token j
    Ok(-picked
        .iter()
        .zip(&scored[1..])
        .filter(|(_, &s)| s)
        .map(|(&x, _)| x as f64)
        .sum::<f64>())
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
            targets: None,
        };
        let b = Heldout {
            sequences: vec![vec![1, 7, 3]],
            targets: None,
        };
        let both = Heldout {
            sequences: vec![vec![1, 5, 9, 2], vec![1, 7, 3]],
            targets: None,
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
            targets: None,
        };
        let err = format!("{:#}", perplexity(&model, &bad).unwrap_err());
        assert!(
            err.contains("held-out sequence 1") && err.contains("token id 999"),
            "{err}"
        );
    }

    #[test]
    fn a_target_mask_scores_only_the_flagged_tokens() {
        let cfg = tiny_config();
        let (w, _) = check_weights(&cfg, random_weights(&cfg, 3)).unwrap();
        let model = Llama::from_hf(&cfg, &w).unwrap();
        let all = Heldout::from_json_str(r#"{"sequences": [[1, 5, 9, 2]]}"#).unwrap();
        let last = Heldout::from_json_str(
            r#"{"sequences": [[1, 5, 9, 2]], "target_mask": [[1, 0, 0, 1]]}"#,
        )
        .unwrap();
        let (pa, pl) = (
            perplexity(&model, &all).unwrap(),
            perplexity(&model, &last).unwrap(),
        );
        assert_eq!((pa.num_tokens, pl.num_tokens), (3, 1));
        let logits = model.forward(&[1, 5, 9, 2]).unwrap();
        let logp = log_softmax(&logits, D::Minus1)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        let expected = -(logp[2][2] as f64);
        assert!(
            (pl.nll_sum - expected).abs() < 1e-4,
            "{} vs {expected}",
            pl.nll_sum
        );
    }

    #[test]
    fn malformed_target_masks_are_rejected_with_the_reason() {
        assert!(
            err_of(r#"{"sequences": [[1, 2]], "target_mask": [[0, 1], [1]]}"#)
                .contains("`target_mask` has 2 entries for 1 sequences")
        );
        assert!(err_of(r#"{"sequences": [[1, 2]], "target_mask": [[1]]}"#)
            .contains("`target_mask[0]` has 1 flags for 2 tokens"));
        assert!(
            err_of(r#"{"sequences": [[1, 2]], "target_mask": [[0, 2]]}"#)
                .contains("`target_mask[0][1]` = 2 is not 0 or 1")
        );
        assert!(
            err_of(r#"{"sequences": [[1, 2]], "target_mask": [[1, 0]]}"#)
                .contains("nothing to score")
        );
    }
}
