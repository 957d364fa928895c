//! A Llama forward pass that returns logits at every position (perplexity needs them all; the
//! candle-transformers models return the last position only).
//!
//! The projections are `QMatMul`s, so one implementation serves both the float32 Hugging Face
//! weights and the quantized GGUF ones. The two differ in one more way: llama.cpp stores q/k rows
//! permuted so that rotary pairs are adjacent (`RopeLayout::Interleaved`), while Hugging Face pairs
//! dimension i with i + head_dim/2 (`RopeLayout::Halves`).

use crate::config::LlamaConfig;
use crate::weights::HfWeights;
use anyhow::{ensure, Context, Result};
use candle_core::quantized::QMatMul;
use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::ops::{rms_norm, silu, softmax_last_dim};
use candle_nn::rotary_emb::{rope, rope_i};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeLayout {
    /// Hugging Face `rotate_half`: dimension i pairs with i + head_dim/2.
    Halves,
    /// llama.cpp / GGUF: dimensions 2i and 2i+1 pair (q/k rows permuted at export).
    Interleaved,
}

/// One decoder layer's weights.
pub struct Block {
    pub attn_norm: Tensor, // [H]
    pub q: QMatMul,        // [nh*hd, H]
    pub k: QMatMul,        // [nkv*hd, H]
    pub v: QMatMul,        // [nkv*hd, H]
    pub o: QMatMul,        // [H, nh*hd]
    pub ffn_norm: Tensor,  // [H]
    pub gate: QMatMul,     // [I, H]
    pub up: QMatMul,       // [I, H]
    pub down: QMatMul,     // [H, I]
}

pub struct Llama {
    pub cfg: LlamaConfig,
    pub layout: RopeLayout,
    pub embed: Tensor, // [V, H] f32
    pub blocks: Vec<Block>,
    pub norm: Tensor,     // [H]
    pub lm_head: QMatMul, // [V, H]
}

impl Llama {
    /// Builds the model over checked Hugging Face weights (no copies: tensors are shared).
    pub fn from_hf(cfg: &LlamaConfig, w: &HfWeights) -> Result<Self> {
        let mm = |name: &str| -> Result<QMatMul> { Ok(QMatMul::Tensor(w.get(name)?.clone())) };
        let blocks = (0..cfg.num_hidden_layers)
            .map(|l| {
                let p = format!("model.layers.{l}");
                Ok(Block {
                    attn_norm: w.get(&format!("{p}.input_layernorm.weight"))?.clone(),
                    q: mm(&format!("{p}.self_attn.q_proj.weight"))?,
                    k: mm(&format!("{p}.self_attn.k_proj.weight"))?,
                    v: mm(&format!("{p}.self_attn.v_proj.weight"))?,
                    o: mm(&format!("{p}.self_attn.o_proj.weight"))?,
                    ffn_norm: w
                        .get(&format!("{p}.post_attention_layernorm.weight"))?
                        .clone(),
                    gate: mm(&format!("{p}.mlp.gate_proj.weight"))?,
                    up: mm(&format!("{p}.mlp.up_proj.weight"))?,
                    down: mm(&format!("{p}.mlp.down_proj.weight"))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let head = if cfg.tie_word_embeddings {
            "model.embed_tokens.weight"
        } else {
            "lm_head.weight"
        };
        Ok(Self {
            cfg: cfg.clone(),
            layout: RopeLayout::Halves,
            embed: w.get("model.embed_tokens.weight")?.clone(),
            blocks,
            norm: w.get("model.norm.weight")?.clone(),
            lm_head: mm(head)?,
        })
    }

    /// Full causal forward over one unpadded sequence: logits [T, V] in f32.
    pub fn forward(&self, ids: &[u32]) -> Result<Tensor> {
        let t = ids.len();
        ensure!(t > 0, "cannot run the model on an empty token sequence");
        let vocab = self.cfg.vocab_size;
        if let Some((pos, id)) = ids.iter().enumerate().find(|(_, &id)| id as usize >= vocab) {
            anyhow::bail!(
                "token id {id} at position {pos} is outside the vocabulary (vocab_size {vocab})"
            );
        }
        let dev = &Device::Cpu;
        let eps = self.cfg.rms_norm_eps as f32;
        let ids = Tensor::new(ids, dev)?;
        let mut x = self.embed.index_select(&ids, 0)?.unsqueeze(0)?; // [1, T, H]
        let (cos, sin) = rope_tables(&self.cfg, t)?; // [T, hd/2]
        let mask = causal_mask(t)?; // [T, T]
        for (l, b) in self.blocks.iter().enumerate() {
            let h = rms_norm(&x, &b.attn_norm, eps)?;
            let attn = self
                .attention(b, &h, &cos, &sin, &mask)
                .with_context(|| format!("layer {l} attention"))?;
            x = (x + attn)?;
            let h = rms_norm(&x, &b.ffn_norm, eps)?;
            let mlp = b
                .down
                .forward(&(silu(&b.gate.forward(&h)?)? * b.up.forward(&h)?)?)?;
            x = (x + mlp)?;
        }
        let x = rms_norm(&x, &self.norm, eps)?;
        Ok(self.lm_head.forward(&x)?.squeeze(0)?) // [T, V]
    }

    fn attention(
        &self,
        b: &Block,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        mask: &Tensor,
    ) -> Result<Tensor> {
        let (_, t, _) = x.dims3()?;
        let (nh, nkv, hd) = (
            self.cfg.num_attention_heads,
            self.cfg.num_key_value_heads,
            self.cfg.head_dim,
        );
        let heads = |proj: &QMatMul, n: usize| -> Result<Tensor> {
            // [1, T, n*hd] -> [1, n, T, hd]
            Ok(proj
                .forward(x)?
                .reshape((1, t, n, hd))?
                .transpose(1, 2)?
                .contiguous()?)
        };
        let (q, k, v) = (heads(&b.q, nh)?, heads(&b.k, nkv)?, heads(&b.v, nkv)?);
        let (q, k) = match self.layout {
            RopeLayout::Halves => (rope(&q, cos, sin)?, rope(&k, cos, sin)?),
            RopeLayout::Interleaved => (rope_i(&q, cos, sin)?, rope_i(&k, cos, sin)?),
        };
        let (k, v) = (repeat_kv(k, nh / nkv)?, repeat_kv(v, nh / nkv)?); // [1, nh, T, hd]
        let scores = (q.matmul(&k.t()?)? * (1.0 / (hd as f64).sqrt()))?; // [1, nh, T, T]
        let probs = softmax_last_dim(&scores.broadcast_add(mask)?)?;
        let y = probs.matmul(&v)?; // [1, nh, T, hd]
        let y = y.transpose(1, 2)?.reshape((1, t, nh * hd))?;
        Ok(b.o.forward(&y)?)
    }
}

/// cos/sin [T, hd/2] exactly as transformers' default rotary embedding computes them in f32.
fn rope_tables(cfg: &LlamaConfig, t: usize) -> Result<(Tensor, Tensor)> {
    let hd = cfg.head_dim;
    let theta = cfg.rope_theta as f32;
    let inv_freq: Vec<f32> = (0..hd)
        .step_by(2)
        .map(|i| 1.0 / theta.powf(i as f32 / hd as f32))
        .collect();
    let mut cos = Vec::with_capacity(t * hd / 2);
    let mut sin = Vec::with_capacity(t * hd / 2);
    for pos in 0..t {
        for f in &inv_freq {
            let angle = pos as f32 * f;
            cos.push(angle.cos());
            sin.push(angle.sin());
        }
    }
    let dev = &Device::Cpu;
    Ok((
        Tensor::from_vec(cos, (t, hd / 2), dev)?,
        Tensor::from_vec(sin, (t, hd / 2), dev)?,
    ))
}

/// Additive mask [T, T]: 0 where key position <= query position, -inf after it.
fn causal_mask(t: usize) -> Result<Tensor> {
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| (0..t).map(move |j| if j <= i { 0.0 } else { f32::NEG_INFINITY }))
        .collect();
    Ok(Tensor::from_vec(mask, (t, t), &Device::Cpu)?)
}

/// [1, nkv, T, hd] -> [1, nkv*n_rep, T, hd]; query head h reads key/value head h / n_rep.
fn repeat_kv(x: Tensor, n_rep: usize) -> Result<Tensor> {
    if n_rep == 1 {
        return Ok(x);
    }
    let (b, nkv, t, hd) = x.dims4()?;
    Ok(x.unsqueeze(2)?
        .broadcast_as((b, nkv, n_rep, t, hd))?
        .contiguous()?
        .reshape((b, nkv * n_rep, t, hd))?)
}

/// Positions (within one sequence) whose logits contain NaN or infinity.
pub fn non_finite_positions(logits: &Tensor) -> Result<Vec<usize>> {
    let rows = logits.to_dtype(DType::F32)?.to_vec2::<f32>()?;
    Ok(rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.iter().any(|x| !x.is_finite()))
        .map(|(i, _)| i)
        .collect())
}

/// Largest absolute difference between two logit tensors of equal shape.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
    Ok((a - b)?
        .abs()?
        .flatten_all()?
        .max(D::Minus1)?
        .to_scalar::<f32>()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::check_weights;
    use crate::weights::tests::{random_weights, tiny_config};

    #[test]
    fn logits_cover_every_position_and_are_causal() {
        let cfg = tiny_config();
        let (w, _) = check_weights(&cfg, random_weights(&cfg, 7)).unwrap();
        let model = Llama::from_hf(&cfg, &w).unwrap();
        let full = model.forward(&[3, 9, 4, 11, 5]).unwrap();
        assert_eq!(full.dims(), &[5, cfg.vocab_size]);
        // A prefix's logits do not depend on the tokens after it.
        let prefix = model.forward(&[3, 9, 4]).unwrap();
        let diff = max_abs_diff(&full.narrow(0, 0, 3).unwrap(), &prefix).unwrap();
        assert!(diff < 1e-5, "prefix logits changed by {diff}");
    }

    #[test]
    fn an_out_of_vocabulary_token_is_named() {
        let cfg = tiny_config();
        let (w, _) = check_weights(&cfg, random_weights(&cfg, 7)).unwrap();
        let err = Llama::from_hf(&cfg, &w)
            .unwrap()
            .forward(&[1, 50])
            .unwrap_err();
        assert!(
            format!("{err:#}").contains("token id 50 at position 1"),
            "{err:#}"
        );
    }
}
