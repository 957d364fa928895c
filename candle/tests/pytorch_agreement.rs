//! Candle's forward pass against PyTorch's on the committed tiny Llama fixture
//! (tests/fixtures/make_fixture.py wrote both the model and the reference numbers).

mod common;

use common::{fixture_dir, read_json};
use hanzo_ml_candle::config::LlamaConfig;
use hanzo_ml_candle::model::Llama;
use hanzo_ml_candle::perplexity::{perplexity, Heldout};
use hanzo_ml_candle::tokenizer::ModelTokenizer;
use hanzo_ml_candle::weights::{check_weights, read_safetensors};

fn fixture_model() -> Llama {
    let dir = fixture_dir();
    let cfg = LlamaConfig::from_file(&dir.join("config.json")).unwrap();
    let (weights, _) = check_weights(
        &cfg,
        read_safetensors(&dir.join("model.safetensors")).unwrap(),
    )
    .unwrap();
    Llama::from_hf(&cfg, &weights).unwrap()
}

#[test]
fn the_fixture_config_takes_rope_theta_from_rope_parameters() {
    let cfg = LlamaConfig::from_file(&fixture_dir().join("config.json")).unwrap();
    assert_eq!(cfg.rope_theta, 50000.0);
    assert_eq!(
        (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim
        ),
        (8, 1, 32)
    );
    assert!(cfg.tie_word_embeddings);
}

#[test]
fn perplexity_matches_pytorch_within_1e_4_relative() {
    let reference = read_json(&fixture_dir().join("reference.json"));
    let heldout = Heldout::from_file(&fixture_dir().join("heldout.json")).unwrap();
    let ppl = perplexity(&fixture_model(), &heldout).unwrap();
    let expected = reference["perplexity"].as_f64().unwrap();
    assert_eq!(
        ppl.num_tokens as u64,
        reference["num_tokens"].as_u64().unwrap()
    );
    let rel = (ppl.value - expected).abs() / expected;
    assert!(
        rel < 1e-4,
        "candle {} vs pytorch {expected}: relative diff {rel:e}",
        ppl.value
    );
}

#[test]
fn logits_match_pytorch_within_1e_4_at_every_position() {
    let reference = read_json(&fixture_dir().join("reference.json"));
    let ids: Vec<u32> = reference["logits"]["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let expected: Vec<Vec<f64>> = reference["logits"]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect()
        })
        .collect();
    let got = fixture_model()
        .forward(&ids)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    assert_eq!(got.len(), expected.len());
    let mut worst = 0f64;
    for (g_row, e_row) in got.iter().zip(&expected) {
        assert_eq!(g_row.len(), e_row.len());
        for (g, e) in g_row.iter().zip(e_row) {
            worst = worst.max((*g as f64 - e).abs());
        }
    }
    assert!(worst < 1e-4, "max |candle - pytorch| logit = {worst:e}");
}

#[test]
fn the_tokenizer_encodes_like_transformers() {
    let reference = read_json(&fixture_dir().join("reference.json"));
    let tok = ModelTokenizer::from_file(&fixture_dir().join("tokenizer.json")).unwrap();
    let ids = tok.encode(reference["prompt"].as_str().unwrap()).unwrap();
    let expected: Vec<u32> = reference["prompt_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(ids, expected);
}
