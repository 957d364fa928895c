"""build-base with a tiny recipe: deterministic, atomic, fully checksummed, loadable."""
from __future__ import annotations

from pathlib import Path

import pytest

from hanzo_ml.base_model import BaseModelRecipe, ModelShape, PretrainRecipe, build_base
from hanzo_ml.chat import load_tokenizer, render
from hanzo_ml.demo_data import build_demo_files
from hanzo_ml.files import sha256_file
from hanzo_ml.modeling import load_causal_lm

TINY = BaseModelRecipe(
    vocab_size=400,
    shape=ModelShape(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                     head_dim=32, max_position_embeddings=128),
    pretrain=PretrainRecipe(steps=3, batch_size=2, seq_length=32, warmup_steps=1),
    threads=1,
)


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("corpus")
    for name in ("corpus/help-center.txt", "corpus/catalog.txt"):
        (directory / Path(name).name).write_text(build_demo_files().files[name][:20_000], encoding="utf-8")
    return directory


@pytest.fixture(scope="module")
def built(corpus_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("models") / "base"
    return out, build_base(out, seed=0, corpus_dir=corpus_dir, recipe=TINY)


def test_the_manifest_checksums_every_file_and_records_the_recipe(built, corpus_dir):
    out, manifest = built
    assert (out / "base-model.json").is_file()
    listed = {f["path"] for f in manifest["files"]}
    assert listed == {p.name for p in out.iterdir()} - {"base-model.json"}
    assert {"model.safetensors", "config.json", "tokenizer.json", "chat_template.jinja"} <= listed
    for entry in manifest["files"]:
        assert sha256_file(out / entry["path"]) == entry["sha256"]
    assert manifest["recipe"]["pretrain"]["steps"] == 3 and manifest["seed"] == 0
    assert [c["path"] for c in manifest["corpus"]] == ["catalog.txt", "help-center.txt"]
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".tmp-")]


def test_the_model_and_tokenizer_load_with_the_chat_template(built):
    out, manifest = built
    tokenizer = load_tokenizer(out)
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token) == (0, 1, "<|end|>")
    assert render(tokenizer, [{"role": "user", "content": "hi"}], add_generation_prompt=True) == \
        "<|bos|><|user|>\nhi<|end|><|assistant|>\n"
    model = load_causal_lm(out)
    assert model.config.vocab_size == len(tokenizer) == manifest["vocab_size"]


def test_the_same_seed_builds_the_same_bytes(built, corpus_dir, tmp_path):
    out, manifest = built
    again = build_base(tmp_path / "again", seed=0, corpus_dir=corpus_dir, recipe=TINY)
    assert again["files"] == manifest["files"]


def test_the_product_shape_suits_gguf_k_quants():
    shape = ModelShape()
    assert shape.hidden_size % 256 == 0 and shape.intermediate_size % 256 == 0
    assert shape.num_attention_heads * shape.head_dim == shape.hidden_size
