"""Shared fixtures: a tiny base model built in seconds and tiny chat datasets.

Nothing here depends on `build-base` output: the tiny model has its own small tokenizer and random weights.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import demo_records, write_jsonl

for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ[variable] = "1"


@pytest.fixture(scope="session")
def tiny_base_dir(tmp_path_factory) -> Path:
    """A 2-layer, 64-wide Llama with a ~500-token BPE and the product's chat template (~1 s to build)."""
    import torch
    from transformers import LlamaForCausalLM

    from hanzo_ml.base_model import ModelShape, llama_config, train_tokenizer
    from hanzo_ml.demo_data import build_demo_files

    corpus = build_demo_files().files["corpus/help-center.txt"]
    documents = [block for block in corpus.split("\n\n") if block.strip()][:200]
    tokenizer = train_tokenizer(documents, vocab_size=512)
    torch.manual_seed(0)
    shape = ModelShape(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                       head_dim=32, max_position_embeddings=256)
    model = LlamaForCausalLM(llama_config(shape, tokenizer))
    out = tmp_path_factory.mktemp("tiny-base")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture
def chat_files(tmp_path) -> dict[str, Path]:
    records = demo_records(60)
    return {
        "train": write_jsonl(tmp_path / "train.jsonl", records[:48]),
        "validation": write_jsonl(tmp_path / "validation.jsonl", records[48:]),
    }


@pytest.fixture(scope="session", autouse=True)
def quiet_libraries():
    from hanzo_ml.cli import quiet_transformers

    quiet_transformers()
