//! Export to a llama.cpp-style GGUF file, and reading it back into the same forward pass.
//!
//! What makes the file loadable by llama.cpp, beyond the tensor bytes: GGUF tensor names
//! (`token_embd`, `blk.N.attn_q`, ...), q/k rows permuted into llama.cpp's interleaved rotary
//! layout (as its `convert_hf_to_gguf.py` does), and the `general.*`, `llama.*` and
//! `tokenizer.ggml.*` metadata it reads at load time.

use crate::config::LlamaConfig;
use crate::model::{Block, Llama, RopeLayout};
use crate::tokenizer::GgufVocab;
use crate::weights::{expected_tensors, HfWeights};
use anyhow::{anyhow, bail, ensure, Context, Result};
use candle_core::quantized::{gguf_file, GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Tensor};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

/// The `--dtype` choices. `Q4KM` is llama.cpp's Q4_K_M mixture, not a single tensor type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Recipe {
    #[value(name = "q8_0")]
    Q8_0,
    #[value(name = "q4_k_m")]
    Q4KM,
    #[value(name = "q6_k")]
    Q6K,
    #[value(name = "f16")]
    F16,
    #[value(name = "f32")]
    F32,
}

impl Recipe {
    pub fn name(self) -> &'static str {
        match self {
            Self::Q8_0 => "q8_0",
            Self::Q4KM => "q4_k_m",
            Self::Q6K => "q6_k",
            Self::F16 => "f16",
            Self::F32 => "f32",
        }
    }

    /// llama.cpp's `llama_ftype` for `general.file_type`.
    fn file_type(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q8_0 => 7,
            Self::Q4KM => 15,
            Self::Q6K => 18,
        }
    }

    /// Largest accepted |ppl(quantized) - ppl(f32)| / ppl(f32). Tiny models lose more to
    /// quantization than large ones, so these are looser than llama.cpp's published deltas.
    pub fn default_perplexity_tolerance(self) -> f64 {
        match self {
            Self::F32 => 1e-4,
            Self::F16 => 0.005,
            Self::Q8_0 => 0.02,
            Self::Q6K => 0.05,
            Self::Q4KM => 0.15,
        }
    }

    /// Tensor type for one tensor, following llama.cpp's `llama_tensor_get_type`.
    fn tensor_type(self, role: Role, layer: usize, n_layers: usize) -> GgmlDType {
        if role == Role::Norm {
            return GgmlDType::F32; // 1-D tensors stay f32 in every llama.cpp file type
        }
        match self {
            Self::F32 => GgmlDType::F32,
            Self::F16 => GgmlDType::F16,
            Self::Q8_0 => GgmlDType::Q8_0,
            Self::Q6K => GgmlDType::Q6K,
            Self::Q4KM => match role {
                Role::Output => GgmlDType::Q6K,
                Role::AttnV | Role::FfnDown if use_more_bits(layer, n_layers) => GgmlDType::Q6K,
                _ => GgmlDType::Q4K,
            },
        }
    }
}

/// llama.cpp's choice of layers that get more bits in the _M mixtures: the first and last
/// eighth, and every third layer in between.
fn use_more_bits(layer: usize, n_layers: usize) -> bool {
    layer < n_layers / 8
        || layer >= 7 * n_layers / 8
        || (layer as isize - (n_layers / 8) as isize) % 3 == 2
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Embedding,
    /// The output projection: `output.weight`, or `token_embd.weight` when tied (llama.cpp
    /// then reads the embedding as the output, and quantizes it like one).
    Output,
    Norm,
    AttnQ,
    AttnK,
    AttnV,
    Other,
    FfnDown,
}

/// One tensor of the export: where it comes from, its GGUF name and type.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedTensor {
    pub gguf_name: String,
    pub hf_name: String,
    pub shape: Vec<usize>,
    pub dtype: GgmlDType,
    /// Heads to permute the rows over for llama.cpp's rotary layout (q and k only).
    rope_heads: Option<usize>,
}

/// GGUF name and role of a Hugging Face tensor name.
fn gguf_name(hf: &str, tied: bool) -> Result<(String, Role, usize)> {
    let simple = match hf {
        "model.embed_tokens.weight" => Some((
            "token_embd.weight",
            if tied { Role::Output } else { Role::Embedding },
        )),
        "model.norm.weight" => Some(("output_norm.weight", Role::Norm)),
        "lm_head.weight" => Some(("output.weight", Role::Output)),
        _ => None,
    };
    if let Some((name, role)) = simple {
        return Ok((name.to_string(), role, 0));
    }
    let rest = hf
        .strip_prefix("model.layers.")
        .ok_or_else(|| anyhow!("no GGUF name for tensor `{hf}`"))?;
    let (layer, suffix) = rest
        .split_once('.')
        .ok_or_else(|| anyhow!("no GGUF name for tensor `{hf}`"))?;
    let layer: usize = layer
        .parse()
        .with_context(|| format!("no GGUF name for tensor `{hf}`"))?;
    let (name, role) = match suffix {
        "input_layernorm.weight" => ("attn_norm", Role::Norm),
        "self_attn.q_proj.weight" => ("attn_q", Role::AttnQ),
        "self_attn.k_proj.weight" => ("attn_k", Role::AttnK),
        "self_attn.v_proj.weight" => ("attn_v", Role::AttnV),
        "self_attn.o_proj.weight" => ("attn_output", Role::Other),
        "post_attention_layernorm.weight" => ("ffn_norm", Role::Norm),
        "mlp.gate_proj.weight" => ("ffn_gate", Role::Other),
        "mlp.up_proj.weight" => ("ffn_up", Role::Other),
        "mlp.down_proj.weight" => ("ffn_down", Role::FfnDown),
        _ => bail!("no GGUF name for tensor `{hf}`"),
    };
    Ok((format!("blk.{layer}.{name}.weight"), role, layer))
}

/// The export plan for `cfg` under `recipe`. Fails, naming the first such tensor, when a
/// tensor's last dimension is not a multiple of its type's block size.
pub fn plan(cfg: &LlamaConfig, recipe: Recipe) -> Result<Vec<PlannedTensor>> {
    let tied = cfg.tie_word_embeddings;
    expected_tensors(cfg)
        .into_iter()
        .map(|spec| {
            let (gguf, role, layer) = gguf_name(&spec.name, tied)?;
            let dtype = recipe.tensor_type(role, layer, cfg.num_hidden_layers);
            let last = *spec.shape.last().expect("tensors are at least 1-D");
            let block = dtype.block_size();
            ensure!(
                last % block == 0,
                "cannot quantize `{gguf}` (from `{}`, shape {:?}) as {}: its last dimension {last} is \
                 not a multiple of the block size {block}",
                spec.name,
                spec.shape,
                ggml_type_name(dtype)
            );
            let rope_heads = match role {
                Role::AttnQ => Some(cfg.num_attention_heads),
                Role::AttnK => Some(cfg.num_key_value_heads),
                _ => None,
            };
            Ok(PlannedTensor { gguf_name: gguf, hf_name: spec.name, shape: spec.shape, dtype, rope_heads })
        })
        .collect()
}

/// Quantizes every planned tensor (q/k rows permuted first).
pub fn quantize(weights: &HfWeights, plan: &[PlannedTensor]) -> Result<Vec<(String, QTensor)>> {
    plan.iter()
        .map(|p| {
            let mut t = weights.get(&p.hf_name)?.clone();
            if let Some(heads) = p.rope_heads {
                t = permute_for_interleaved_rope(&t, heads)?;
            }
            let q = QTensor::quantize(&t, p.dtype).with_context(|| {
                format!(
                    "cannot quantize `{}` as {}",
                    p.gguf_name,
                    ggml_type_name(p.dtype)
                )
            })?;
            Ok((p.gguf_name.clone(), q))
        })
        .collect()
}

/// Reorders the rows of a q or k projection [heads*hd, in] so that, within each head, rows i and
/// i + hd/2 (paired by Hugging Face's rotate_half) become rows 2i and 2i+1 (paired by llama.cpp).
/// Equivalent to `convert_hf_to_gguf.py`'s `permute`: reshape(heads, 2, hd/2, in).swapaxes(1, 2).
pub fn permute_for_interleaved_rope(w: &Tensor, heads: usize) -> Result<Tensor> {
    let (rows, cols) = w.dims2()?;
    let hd = rows / heads;
    Ok(w.reshape((heads, 2, hd / 2, cols))?
        .transpose(1, 2)?
        .contiguous()?
        .reshape((rows, cols))?)
}

pub fn ggml_type_name(t: GgmlDType) -> &'static str {
    match t {
        GgmlDType::F32 => "f32",
        GgmlDType::F16 => "f16",
        GgmlDType::BF16 => "bf16",
        GgmlDType::Q4_0 => "q4_0",
        GgmlDType::Q4_1 => "q4_1",
        GgmlDType::Q5_0 => "q5_0",
        GgmlDType::Q5_1 => "q5_1",
        GgmlDType::Q8_0 => "q8_0",
        GgmlDType::Q8_1 => "q8_1",
        GgmlDType::Q2K => "q2_k",
        GgmlDType::Q3K => "q3_k",
        GgmlDType::Q4K => "q4_k",
        GgmlDType::Q5K => "q5_k",
        GgmlDType::Q6K => "q6_k",
        GgmlDType::Q8K => "q8_k",
    }
}

/// "12 q4_k, 4 q6_k, 9 f32": how many tensors of each type.
pub fn type_counts<'a>(types: impl IntoIterator<Item = &'a GgmlDType>) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for t in types {
        let name = ggml_type_name(*t);
        match counts.iter_mut().find(|(n, _)| *n == name) {
            Some((_, c)) => *c += 1,
            None => counts.push((name, 1)),
        }
    }
    counts
        .iter()
        .map(|(n, c)| format!("{c} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `general.*`, `llama.*` and `tokenizer.ggml.*` metadata, typed as llama.cpp reads them.
pub fn metadata(
    cfg: &LlamaConfig,
    vocab: &GgufVocab,
    name: &str,
    recipe: Recipe,
) -> Vec<(String, gguf_file::Value)> {
    use gguf_file::Value as V;
    let u32v = |n: usize| V::U32(n as u32);
    let strings = |items: &[String]| V::Array(items.iter().cloned().map(V::String).collect());
    let mut md = vec![
        ("general.architecture", V::String("llama".into())),
        ("general.name", V::String(name.into())),
        ("general.file_type", V::U32(recipe.file_type())),
        ("general.quantization_version", V::U32(2)),
        ("llama.context_length", u32v(cfg.max_position_embeddings)),
        ("llama.embedding_length", u32v(cfg.hidden_size)),
        ("llama.block_count", u32v(cfg.num_hidden_layers)),
        ("llama.feed_forward_length", u32v(cfg.intermediate_size)),
        ("llama.attention.head_count", u32v(cfg.num_attention_heads)),
        (
            "llama.attention.head_count_kv",
            u32v(cfg.num_key_value_heads),
        ),
        ("llama.attention.key_length", u32v(cfg.head_dim)),
        ("llama.attention.value_length", u32v(cfg.head_dim)),
        (
            "llama.attention.layer_norm_rms_epsilon",
            V::F32(cfg.rms_norm_eps as f32),
        ),
        ("llama.rope.freq_base", V::F32(cfg.rope_theta as f32)),
        ("llama.rope.dimension_count", u32v(cfg.head_dim)),
        ("llama.vocab_size", u32v(cfg.vocab_size)),
        ("tokenizer.ggml.model", V::String("gpt2".into())),
        ("tokenizer.ggml.pre", V::String(vocab.pre.into())),
        ("tokenizer.ggml.tokens", strings(&vocab.tokens)),
        (
            "tokenizer.ggml.token_type",
            V::Array(vocab.token_types.iter().map(|&t| V::I32(t)).collect()),
        ),
        ("tokenizer.ggml.merges", strings(&vocab.merges)),
        ("tokenizer.ggml.add_bos_token", V::Bool(vocab.add_bos)),
        ("tokenizer.ggml.add_eos_token", V::Bool(vocab.add_eos)),
    ];
    let ids = [
        ("tokenizer.ggml.bos_token_id", cfg.bos_token_id),
        ("tokenizer.ggml.eos_token_id", cfg.eos_token_id),
        ("tokenizer.ggml.padding_token_id", cfg.pad_token_id),
    ];
    md.extend(
        ids.into_iter()
            .filter_map(|(k, id)| id.map(|id| (k, V::U32(id)))),
    );
    md.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// The GGUF format version this tool writes: llama.cpp writes 3, and its readers expect it.
pub const GGUF_VERSION: u32 = 3;

/// candle's writer stamps version 2 into the header. Versions 2 and 3 lay out a little-endian file
/// byte for byte alike (3 only added big-endian files), so the header's version field is all that
/// differs: overwrite it in place.
fn mark_version_3(file: &mut File) -> Result<()> {
    use std::io::{Seek, SeekFrom};
    file.seek(SeekFrom::Start(4))
        .context("cannot seek to the GGUF version field")?;
    file.write_all(&GGUF_VERSION.to_le_bytes())
        .context("cannot write the GGUF version field")?;
    Ok(())
}

/// Writes the GGUF file next to `path` under a temporary name, fsyncs it, then renames it into
/// place, so a reader never sees a half-written file.
pub fn write_atomically(
    path: &Path,
    metadata: &[(String, gguf_file::Value)],
    tensors: &[(String, QTensor)],
) -> Result<()> {
    let file_name = path
        .file_name()
        .ok_or_else(|| anyhow!("output path {} has no file name", path.display()))?;
    let tmp = path.with_file_name(format!(
        ".{}.tmp-{}",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| -> Result<()> {
        let file =
            File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        let mut w = BufWriter::new(file);
        let md: Vec<(&str, &gguf_file::Value)> =
            metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
        gguf_file::write(&mut w, &md, &ts).context("cannot write GGUF")?;
        w.flush()?;
        let mut file = w.into_inner().map_err(|e| e.into_error())?;
        mark_version_3(&mut file)?;
        file.sync_all().context("cannot fsync the GGUF file")?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .with_context(|| format!("cannot fsync {}", dir.display()))?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.with_context(|| format!("writing {}", path.display()))
}

/// Streaming SHA-256 of a file, hex-encoded, and its size.
pub fn sha256_file(path: &Path) -> Result<(String, u64)> {
    use sha2::{Digest, Sha256};
    let mut file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    let hex = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok((hex, size))
}

/// A GGUF file read back: the model over its (still quantized) tensors, plus what was in it.
pub struct GgufModel {
    pub model: Llama,
    pub metadata: HashMap<String, gguf_file::Value>,
    pub tensor_types: HashMap<String, GgmlDType>,
}

/// Loads a llama GGUF as written by `write_atomically` (or llama.cpp's converter), checking every
/// expected tensor by name and shape.
pub fn load(path: &Path) -> Result<GgufModel> {
    let mut reader = BufReader::new(
        File::open(path).with_context(|| format!("cannot open {}", path.display()))?,
    );
    let content = gguf_file::Content::read(&mut reader)
        .with_context(|| format!("{} is not a readable GGUF file", path.display()))?;
    let cfg = config_from_metadata(&content).context("GGUF metadata")?;
    let mut read = |name: &str, shape: &[usize]| -> Result<QTensor> {
        let q = content
            .tensor(&mut reader, name, &Device::Cpu)
            .with_context(|| format!("GGUF tensor `{name}`"))?;
        ensure!(
            q.shape().dims() == shape,
            "GGUF tensor `{name}` has shape {:?}, expected {shape:?}",
            q.shape().dims()
        );
        Ok(q)
    };
    let mut tensors: HashMap<String, QTensor> = HashMap::new();
    for spec in expected_tensors(&cfg) {
        let (gguf, _, _) = gguf_name(&spec.name, cfg.tie_word_embeddings)?;
        tensors.insert(gguf.clone(), read(&gguf, &spec.shape)?);
    }
    let (v, h) = (cfg.vocab_size, cfg.hidden_size);
    let lm_head = read(
        if cfg.tie_word_embeddings {
            "token_embd.weight"
        } else {
            "output.weight"
        },
        &[v, h],
    )?;
    let tensor_types = content
        .tensor_infos
        .iter()
        .map(|(k, i)| (k.clone(), i.ggml_dtype))
        .collect();
    let model = model_from_tensors(&cfg, tensors, lm_head)?;
    Ok(GgufModel {
        model,
        metadata: content.metadata,
        tensor_types,
    })
}

fn model_from_tensors(
    cfg: &LlamaConfig,
    mut t: HashMap<String, QTensor>,
    lm_head: QTensor,
) -> Result<Llama> {
    let mut take = |name: String| {
        t.remove(&name)
            .ok_or_else(|| anyhow!("GGUF tensor `{name}` is missing"))
    };
    let dense = |q: QTensor| -> Result<Tensor> { Ok(q.dequantize(&Device::Cpu)?) };
    let mm = |q: QTensor| -> Result<QMatMul> { Ok(QMatMul::from_qtensor(q)?) };
    let mut blocks = Vec::with_capacity(cfg.num_hidden_layers);
    for l in 0..cfg.num_hidden_layers {
        let mut get = |n: &str| take(format!("blk.{l}.{n}.weight"));
        blocks.push(Block {
            attn_norm: dense(get("attn_norm")?)?,
            q: mm(get("attn_q")?)?,
            k: mm(get("attn_k")?)?,
            v: mm(get("attn_v")?)?,
            o: mm(get("attn_output")?)?,
            ffn_norm: dense(get("ffn_norm")?)?,
            gate: mm(get("ffn_gate")?)?,
            up: mm(get("ffn_up")?)?,
            down: mm(get("ffn_down")?)?,
        });
    }
    Ok(Llama {
        cfg: cfg.clone(),
        layout: RopeLayout::Interleaved,
        embed: dense(take("token_embd.weight".into())?)?,
        blocks,
        norm: dense(take("output_norm.weight".into())?)?,
        lm_head: mm(lm_head)?,
    })
}

/// `cfg` as it reads back from GGUF metadata, where floats are stored as f32.
pub fn as_stored(cfg: &LlamaConfig) -> LlamaConfig {
    LlamaConfig {
        rms_norm_eps: (cfg.rms_norm_eps as f32) as f64,
        rope_theta: (cfg.rope_theta as f32) as f64,
        ..cfg.clone()
    }
}

/// The model shape as llama.cpp derives it from the metadata.
fn config_from_metadata(content: &gguf_file::Content) -> Result<LlamaConfig> {
    let md = &content.metadata;
    let get = |key: &str| md.get(key).ok_or_else(|| anyhow!("missing key `{key}`"));
    let u = |key: &str| -> Result<usize> {
        Ok(get(key)?.to_u32().with_context(|| format!("key `{key}`"))? as usize)
    };
    let f = |key: &str| -> Result<f64> {
        Ok(get(key)?.to_f32().with_context(|| format!("key `{key}`"))? as f64)
    };
    let id = |key: &str| md.get(key).and_then(|v| v.to_u32().ok());
    let arch = get("general.architecture")?.to_string()?;
    ensure!(
        arch == "llama",
        "`general.architecture` is {arch:?}, expected \"llama\""
    );
    let vocab_size = match md.get("llama.vocab_size") {
        Some(v) => v.to_u32()? as usize,
        None => get("tokenizer.ggml.tokens")?.to_vec()?.len(),
    };
    Ok(LlamaConfig {
        hidden_size: u("llama.embedding_length")?,
        intermediate_size: u("llama.feed_forward_length")?,
        num_hidden_layers: u("llama.block_count")?,
        num_attention_heads: u("llama.attention.head_count")?,
        num_key_value_heads: u("llama.attention.head_count_kv")?,
        head_dim: u("llama.rope.dimension_count")?,
        vocab_size,
        rms_norm_eps: f("llama.attention.layer_norm_rms_epsilon")?,
        rope_theta: f("llama.rope.freq_base").unwrap_or(10_000.0),
        max_position_embeddings: u("llama.context_length")?,
        tie_word_embeddings: !content.tensor_infos.contains_key("output.weight"),
        bos_token_id: id("tokenizer.ggml.bos_token_id"),
        eos_token_id: id("tokenizer.ggml.eos_token_id"),
        pad_token_id: id("tokenizer.ggml.padding_token_id"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::max_abs_diff;
    use crate::tokenizer::tests::tiny_tokenizer_json;
    use crate::tokenizer::ModelTokenizer;
    use crate::weights::check_weights;
    use crate::weights::tests::{random_weights, tiny_config};

    fn export(
        cfg: &LlamaConfig,
        weights: &HfWeights,
        recipe: Recipe,
        dir: &Path,
    ) -> std::path::PathBuf {
        let tok = ModelTokenizer::from_json_str(&tiny_tokenizer_json().to_string()).unwrap();
        let vocab = tok
            .gguf_vocab(cfg.vocab_size, cfg.bos_token_id, cfg.eos_token_id)
            .unwrap();
        let tensors = quantize(weights, &plan(cfg, recipe).unwrap()).unwrap();
        let path = dir.join("model.gguf");
        write_atomically(&path, &metadata(cfg, &vocab, "tiny", recipe), &tensors).unwrap();
        path
    }

    #[test]
    fn the_q4_k_m_mixture_matches_llama_cpp() {
        // 8 layers: more bits for layer 0 (first eighth), 3 and 6 (every third after it), 7 (last eighth).
        let picked: Vec<usize> = (0..8).filter(|&l| use_more_bits(l, 8)).collect();
        assert_eq!(picked, vec![0, 3, 6, 7]);
        let two: Vec<usize> = (0..2).filter(|&l| use_more_bits(l, 2)).collect();
        assert_eq!(two, vec![1]);
        let r = Recipe::Q4KM;
        assert_eq!(r.tensor_type(Role::AttnV, 3, 8), GgmlDType::Q6K);
        assert_eq!(r.tensor_type(Role::FfnDown, 6, 8), GgmlDType::Q6K);
        assert_eq!(r.tensor_type(Role::AttnV, 2, 8), GgmlDType::Q4K);
        assert_eq!(r.tensor_type(Role::AttnQ, 0, 8), GgmlDType::Q4K);
        assert_eq!(r.tensor_type(Role::Output, 0, 8), GgmlDType::Q6K);
        assert_eq!(r.tensor_type(Role::Norm, 0, 8), GgmlDType::F32);
    }

    #[test]
    fn a_dimension_that_is_not_a_multiple_of_256_is_named_for_k_quants() {
        let mut cfg = tiny_config();
        cfg.hidden_size = 256;
        cfg.head_dim = 64;
        cfg.intermediate_size = 320;
        let err = format!("{:#}", plan(&cfg, Recipe::Q4KM).unwrap_err());
        assert!(
            err.contains("cannot quantize `blk.0.ffn_down.weight` (from `model.layers.0.mlp.down_proj.weight`, shape [256, 320]) as q4_k")
                && err.contains("last dimension 320 is not a multiple of the block size 256"),
            "{err}"
        );
        // 320 is a multiple of 32, so q8_0 accepts the same model.
        plan(&cfg, Recipe::Q8_0).unwrap();
    }

    #[test]
    fn the_rope_permutation_pairs_half_rows_into_adjacent_rows() {
        // One head of 4 rows: HF pairs (0, 2) and (1, 3); llama.cpp wants them adjacent.
        let w = Tensor::new(&[[0f32], [1.], [2.], [3.]], &Device::Cpu).unwrap();
        let p = permute_for_interleaved_rope(&w, 1).unwrap();
        assert_eq!(
            p.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            vec![0., 2., 1., 3.]
        );
    }

    #[test]
    fn an_f32_export_reproduces_the_hugging_face_logits_with_grouped_query_attention() {
        let cfg = tiny_config(); // 4 heads over 2 key/value heads
        let (w, _) = check_weights(&cfg, random_weights(&cfg, 11)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = export(&cfg, &w, Recipe::F32, dir.path());
        let gguf = load(&path).unwrap();
        assert_eq!(gguf.model.cfg, as_stored(&cfg));
        let ids = [0u32, 7, 3, 40, 12, 9, 41, 5];
        let expected = Llama::from_hf(&cfg, &w).unwrap().forward(&ids).unwrap();
        let got = gguf.model.forward(&ids).unwrap();
        let diff = max_abs_diff(&expected, &got).unwrap();
        assert!(diff < 1e-4, "GGUF logits differ by {diff}");
    }

    #[test]
    fn a_tied_model_is_exported_without_an_output_tensor() {
        let mut cfg = tiny_config();
        cfg.tie_word_embeddings = true;
        let (w, _) = check_weights(&cfg, random_weights(&cfg, 5)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = export(&cfg, &w, Recipe::Q8_0, dir.path());
        let gguf = load(&path).unwrap();
        assert!(!gguf.tensor_types.contains_key("output.weight"));
        assert_eq!(gguf.tensor_types["token_embd.weight"], GgmlDType::Q8_0);
        assert!(gguf.model.cfg.tie_word_embeddings);
        let logits = gguf.model.forward(&[0, 1, 2]).unwrap();
        assert!(crate::model::non_finite_positions(&logits)
            .unwrap()
            .is_empty());
    }
}
