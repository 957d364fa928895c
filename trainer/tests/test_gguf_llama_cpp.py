"""The GGUF our Candle tool writes loads with llama.cpp's own reader (`gguf` on PyPI, gguf-py from llama.cpp).

The inference engine loads these files with llama.cpp, so a file only Candle can read is not a deliverable: this
quantizes the tiny base model with the real `hanzo-ml-candle` binary (from .bootstrap.json) and reads the result
back with `gguf.GGUFReader`, checking the header version, tensor names and types, and the metadata llama.cpp needs.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO_DIR = Path(__file__).resolve().parents[2]


def candle_binary() -> Path:
    configured = os.environ.get("HANZO_ML_CANDLE") or json.loads((REPO_DIR / ".bootstrap.json").read_text()).get("candle")
    if not configured or not Path(configured).exists():
        pytest.fail(f"no hanzo-ml-candle binary at {configured!r} (.bootstrap.json 'candle'): run scripts/bootstrap.sh")
    return Path(configured)


def quantize(model_dir: Path, out: Path, dtype: str) -> dict:
    run = subprocess.run([str(candle_binary()), "quantize", "--model", str(model_dir), "--out", str(out),
                          "--dtype", dtype, "--json"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"quantize failed ({run.returncode}): {run.stdout}\n{run.stderr}"
    return json.loads(run.stdout)


def field_value(reader, key: str):
    """A scalar or string metadata value as Python data (gguf-py keeps raw parts and indexes into them)."""
    field = reader.get_field(key)
    assert field is not None, f"metadata {key} is missing"
    return field.contents()


@pytest.fixture(scope="module")
def q8_file(tiny_base_dir, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("gguf") / "tiny-q8_0.gguf"
    return out, quantize(tiny_base_dir, out, "q8_0")


def test_the_file_is_gguf_version_3(q8_file):
    from gguf import GGUFReader

    path, _ = q8_file
    assert path.read_bytes()[:4] == b"GGUF"
    reader = GGUFReader(path)
    assert int(reader.get_field("GGUF.version").parts[-1][0]) == 3


def test_llama_cpp_reads_every_tensor_with_its_name_shape_and_type(q8_file, tiny_base_dir):
    from gguf import GGMLQuantizationType, GGUFReader

    path, report = q8_file
    reader = GGUFReader(path)
    config = json.loads((tiny_base_dir / "config.json").read_text())
    layers, hidden = config["num_hidden_layers"], config["hidden_size"]
    per_block = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]
    expected = {"token_embd.weight", "output_norm.weight"} | {f"blk.{i}.{n}.weight" for i in range(layers) for n in per_block}
    if not config.get("tie_word_embeddings", False):
        expected.add("output.weight")
    tensors = {t.name: t for t in reader.tensors}
    assert set(tensors) == expected
    assert len(reader.tensors) == report["quantization"]["tensors"]
    for name, t in tensors.items():
        want = GGMLQuantizationType.F32 if name.endswith("norm.weight") else GGMLQuantizationType.Q8_0
        assert t.tensor_type == want, f"{name}: {t.tensor_type.name}, expected {want.name}"
    # GGUF lists dimensions innermost first: the embedding is [hidden, vocab].
    assert [int(d) for d in tensors["token_embd.weight"].shape] == [hidden, config["vocab_size"]]


def test_llama_cpp_finds_the_llama_metadata(q8_file, tiny_base_dir):
    from gguf import GGUFReader

    path, _ = q8_file
    reader = GGUFReader(path)
    config = json.loads((tiny_base_dir / "config.json").read_text())
    assert field_value(reader, "general.architecture") == "llama"
    assert field_value(reader, "llama.block_count") == config["num_hidden_layers"]
    assert field_value(reader, "llama.embedding_length") == config["hidden_size"]
    assert field_value(reader, "llama.attention.head_count") == config["num_attention_heads"]
    assert field_value(reader, "tokenizer.ggml.model") == "gpt2"
    assert len(field_value(reader, "tokenizer.ggml.tokens")) == config["vocab_size"]
