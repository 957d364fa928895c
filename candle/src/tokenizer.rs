//! `tokenizer.json`: loaded with `tokenizers` to encode prompts, and read as raw JSON to carry the
//! vocabulary, merges and special tokens into GGUF `tokenizer.ggml.*` metadata.

use anyhow::{anyhow, bail, ensure, Context, Result};
use serde_json::Value;
use std::path::Path;
use tokenizers::Tokenizer;

/// llama.cpp `llama_token_type` values.
const TOKEN_NORMAL: i32 = 1;
const TOKEN_CONTROL: i32 = 3;
const TOKEN_USER_DEFINED: i32 = 4;
const TOKEN_UNUSED: i32 = 5;

pub struct ModelTokenizer {
    pub tokenizer: Tokenizer,
    raw: Value,
}

/// The vocabulary as GGUF `tokenizer.ggml.*` wants it, one entry per model vocabulary row.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufVocab {
    pub tokens: Vec<String>,
    pub token_types: Vec<i32>,
    pub merges: Vec<String>,
    /// llama.cpp pre-tokenizer name (`tokenizer.ggml.pre`).
    pub pre: &'static str,
    pub add_bos: bool,
    pub add_eos: bool,
}

impl ModelTokenizer {
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Self::from_json_str(&text).with_context(|| format!("tokenizer {}", path.display()))
    }

    pub fn from_json_str(text: &str) -> Result<Self> {
        let raw: Value = serde_json::from_str(text).context("tokenizer.json is not valid JSON")?;
        let tokenizer = Tokenizer::from_bytes(text.as_bytes())
            .map_err(|e| anyhow!("tokenizer.json cannot be loaded: {e}"))?;
        Ok(Self { tokenizer, raw })
    }

    /// Token ids for `text`, with the tokenizer's own special tokens (as transformers adds them).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| anyhow!("cannot tokenize {text:?}: {e}"))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Every id the tokenizer can produce must index a row of the embedding.
    pub fn check_fits(&self, vocab_size: usize) -> Result<usize> {
        let vocab = self.tokenizer.get_vocab(true);
        if let Some((tok, id)) = vocab.iter().max_by_key(|(_, &id)| id) {
            ensure!(
                (*id as usize) < vocab_size,
                "tokenizer.json: token {tok:?} has id {id}, outside the model's vocab_size {vocab_size}"
            );
        }
        Ok(vocab.len())
    }

    /// The vocabulary padded to `vocab_size` rows, for GGUF export. Only byte-level BPE
    /// tokenizers with the GPT-2 pre-tokenizer are exported: anything else would tokenize
    /// differently under llama.cpp, so it is refused rather than written wrongly.
    pub fn gguf_vocab(
        &self,
        vocab_size: usize,
        bos: Option<u32>,
        eos: Option<u32>,
    ) -> Result<GgufVocab> {
        let model = &self.raw["model"];
        let kind = model["type"].as_str().unwrap_or("<none>");
        ensure!(
            kind == "BPE",
            "tokenizer.json: model type {kind:?} cannot be exported to GGUF (byte-level BPE only)"
        );
        let pre = llama_cpp_pre(&self.raw["pre_tokenizer"])?;

        let mut tokens: Vec<Option<(String, i32)>> = vec![None; vocab_size];
        let vocab = model["vocab"]
            .as_object()
            .ok_or_else(|| anyhow!("tokenizer.json: `model.vocab` is not an object"))?;
        for (tok, id) in vocab {
            place(&mut tokens, tok, id, TOKEN_NORMAL)?;
        }
        for added in self.raw["added_tokens"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            let tok = added["content"]
                .as_str()
                .ok_or_else(|| anyhow!("tokenizer.json: added token without `content`"))?;
            let kind = if added["special"].as_bool() == Some(true) {
                TOKEN_CONTROL
            } else {
                TOKEN_USER_DEFINED
            };
            place(&mut tokens, tok, &added["id"], kind)?;
        }
        let (tokens, token_types) = tokens
            .into_iter()
            .enumerate()
            .map(|(id, entry)| entry.unwrap_or_else(|| (format!("[PAD{id}]"), TOKEN_UNUSED)))
            .unzip();

        let merges = model["merges"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(i, m)| {
                merge_string(m)
                    .with_context(|| format!("tokenizer.json: `model.merges[{i}]` = {m}"))
            })
            .collect::<Result<Vec<_>>>()?;

        let probe = self.encode("a")?;
        let add_bos = bos.is_some() && probe.first() == bos.as_ref();
        let add_eos = eos.is_some() && probe.len() > 1 && probe.last() == eos.as_ref();
        Ok(GgufVocab {
            tokens,
            token_types,
            merges,
            pre,
            add_bos,
            add_eos,
        })
    }
}

fn place(tokens: &mut [Option<(String, i32)>], tok: &str, id: &Value, kind: i32) -> Result<()> {
    let id = id
        .as_u64()
        .ok_or_else(|| anyhow!("tokenizer.json: token {tok:?} has no integer id"))?
        as usize;
    let n = tokens.len();
    let slot = tokens.get_mut(id).ok_or_else(|| {
        anyhow!("tokenizer.json: token {tok:?} has id {id}, outside the model's vocab_size {n}")
    })?;
    *slot = Some((tok.to_string(), kind));
    Ok(())
}

/// GGUF stores merges as "left right"; tokenizer.json has either that string or a [left, right] pair.
fn merge_string(m: &Value) -> Result<String> {
    match m {
        Value::String(s) if s.contains(' ') => Ok(s.clone()),
        Value::Array(pair) if pair.len() == 2 => match (pair[0].as_str(), pair[1].as_str()) {
            (Some(a), Some(b)) => Ok(format!("{a} {b}")),
            _ => bail!("not a pair of strings"),
        },
        _ => bail!("not a merge"),
    }
}

/// The llama.cpp pre-tokenizer equivalent to tokenizer.json's.
fn llama_cpp_pre(pre: &Value) -> Result<&'static str> {
    let is_gpt2_byte_level =
        pre["type"] == "ByteLevel" && pre["use_regex"].as_bool().unwrap_or(true);
    ensure!(
        is_gpt2_byte_level,
        "tokenizer.json: pre-tokenizer {pre} has no exported llama.cpp equivalent \
         (only ByteLevel with the GPT-2 regex is supported)"
    );
    Ok("gpt-2")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A byte-level BPE over 40 symbols with two merges and two special tokens.
    pub(crate) fn tiny_tokenizer_json() -> Value {
        let mut vocab = serde_json::Map::new();
        for (i, c) in "abcdefghijklmnopqrstuvwxyzĠ.,!?".chars().enumerate() {
            vocab.insert(c.to_string(), json!(i + 2));
        }
        vocab.insert("ab".into(), json!(40));
        vocab.insert("Ġa".into(), json!(41));
        json!({
            "version": "1.0",
            "added_tokens": [
                {"id": 0, "content": "<|bos|>", "special": true, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false},
                {"id": 1, "content": "<|eos|>", "special": true, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false}
            ],
            "normalizer": null,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
            "post_processor": {
                "type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<|bos|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {"<|bos|>": {"id": "<|bos|>", "ids": [0], "tokens": ["<|bos|>"]}}
            },
            "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
            "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                      "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                      "vocab": vocab, "merges": [["a", "b"], ["Ġ", "a"]]}
        })
    }

    #[test]
    fn the_gguf_vocabulary_is_padded_typed_and_detects_bos() {
        let tok = ModelTokenizer::from_json_str(&tiny_tokenizer_json().to_string()).unwrap();
        assert_eq!(tok.encode("ab a").unwrap(), vec![0, 40, 41]);
        let v = tok.gguf_vocab(50, Some(0), Some(1)).unwrap();
        assert_eq!(v.tokens.len(), 50);
        assert_eq!(
            (v.tokens[0].as_str(), v.token_types[0]),
            ("<|bos|>", TOKEN_CONTROL)
        );
        assert_eq!(
            (v.tokens[40].as_str(), v.token_types[40]),
            ("ab", TOKEN_NORMAL)
        );
        assert_eq!(
            (v.tokens[49].as_str(), v.token_types[49]),
            ("[PAD49]", TOKEN_UNUSED)
        );
        assert_eq!(v.merges, vec!["a b".to_string(), "Ġ a".to_string()]);
        // Older tokenizer.json files write merges as "left right" strings.
        assert_eq!(merge_string(&json!("Ġ a")).unwrap(), "Ġ a");
        assert!(v.add_bos && !v.add_eos);
        assert_eq!(v.pre, "gpt-2");
    }

    #[test]
    fn a_token_beyond_the_model_vocabulary_is_named() {
        let tok = ModelTokenizer::from_json_str(&tiny_tokenizer_json().to_string()).unwrap();
        let err = format!("{:#}", tok.check_fits(41).unwrap_err());
        assert!(
            err.contains("token \"Ġa\" has id 41, outside the model's vocab_size 41"),
            "{err}"
        );
    }

    #[test]
    fn a_non_byte_level_pre_tokenizer_is_refused_for_export() {
        let mut raw = tiny_tokenizer_json();
        raw["pre_tokenizer"] = json!({"type": "Whitespace"});
        let tok = ModelTokenizer::from_json_str(&raw.to_string()).unwrap();
        let err = format!("{:#}", tok.gguf_vocab(50, None, None).unwrap_err());
        assert!(
            err.contains("pre-tokenizer") && err.contains("Whitespace"),
            "{err}"
        );
    }
}
