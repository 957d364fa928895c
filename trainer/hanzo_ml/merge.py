"""Merge a LoRA adapter into its base and compute the reference perplexity the Candle tool must reproduce.

    python -m hanzo_ml merge --spec job.json

Writes:
    <output_dir>/                       merged model: float32 safetensors, config.json, tokenizer files
    <output_dir>/../heldout-tokens.json {"sequences": [[ids...], ...]}: the rendered held-out conversations
    <reference_path>                    MergeReport

Reference perplexity, defined so that another implementation can reproduce it exactly: for each sequence of n
tokens, score tokens 1..n-1 given their prefix, one sequence at a time, no padding, no BOS beyond what the ids
hold; ppl = exp(sum of NLL over all scored tokens / number of scored tokens). Sequences shorter than 2 tokens
have nothing to score and are left out of the file.
"""
from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

import torch
import torch.nn.functional as F

from hanzo_ml.chat import encode_conversation, load_tokenizer, read_chat_jsonl
from hanzo_ml.errors import InputError
from hanzo_ml.files import atomic_write_json, dumps_json, file_entries, replace_dir
from hanzo_ml.modeling import configure_torch, load_causal_lm
from hanzo_ml.spec import require_existing

log = logging.getLogger(__name__)


def merge(spec, spec_path: Path) -> dict:
    require_existing(spec_path, "base_model_path", spec.base_model_path, kind="dir")
    require_existing(spec_path, "adapter_path", spec.adapter_path, kind="dir")
    require_existing(spec_path, "heldout_path", spec.heldout_path)
    tokenizer = load_tokenizer(Path(spec.base_model_path))
    conversations = read_chat_jsonl(Path(spec.heldout_path))[: spec.max_sequences]
    sequences = [ids for ids in (encode_conversation(tokenizer, m)[: spec.max_seq_length] for m in conversations)
                 if len(ids) >= 2]
    if not sequences:
        raise InputError(f"{spec.heldout_path}: no record renders to 2 or more tokens")

    configure_torch(spec.threads)
    output_dir = Path(spec.output_dir)
    merged_model = merge_adapter(Path(spec.base_model_path), Path(spec.adapter_path))
    write_merged_dir(merged_model, tokenizer, output_dir)
    del merged_model

    heldout_tokens_path = Path(spec.heldout_tokens_path) if getattr(spec, "heldout_tokens_path", None) \
        else output_dir.parent / "heldout-tokens.json"
    atomic_write_json(heldout_tokens_path, {"sequences": sequences})
    # Score the files as written, not the in-memory model: the reference must describe what ships.
    perplexity, num_tokens = reference_perplexity(load_causal_lm(output_dir), sequences)
    log.info("reference perplexity %.4f over %d tokens of %d sequences", perplexity, num_tokens, len(sequences))
    report = {
        "merged_dir": str(output_dir),
        "heldout_tokens_path": str(heldout_tokens_path),
        "reference_perplexity": perplexity,
        "num_tokens": num_tokens,
        "files": file_entries(output_dir),
    }
    atomic_write_json(Path(spec.reference_path), report)
    return report


def merge_adapter(base_model_path: Path, adapter_path: Path):
    from peft import PeftModel

    base = load_causal_lm(base_model_path)
    merged = PeftModel.from_pretrained(base, str(adapter_path)).merge_and_unload()  # W + (alpha/r) B A, in fp32
    return merged.to(torch.float32)


def write_merged_dir(model, tokenizer, output_dir: Path) -> None:
    """Model + tokenizer into a temp dir, config patched, then renamed into place."""
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = output_dir.with_name(f".tmp-{output_dir.name}-{os.getpid()}")
    model.save_pretrained(tmp)  # safetensors
    tokenizer.save_pretrained(tmp)
    add_flat_rope_theta(tmp / "config.json")
    replace_dir(tmp, output_dir)


def add_flat_rope_theta(config_path: Path) -> None:
    """transformers 5 nests rope_theta under rope_parameters; readers of the older layout (the Candle tool)
    look for a top-level rope_theta and would silently fall back to 10000 without it."""
    config = json.loads(config_path.read_text(encoding="utf-8"))
    rope_parameters = config.get("rope_parameters")
    if isinstance(rope_parameters, dict) and "rope_theta" in rope_parameters and "rope_theta" not in config:
        config["rope_theta"] = rope_parameters["rope_theta"]
        config_path.write_text(dumps_json(config), encoding="utf-8")


@torch.no_grad()
def reference_perplexity(model, sequences: list[list[int]]) -> tuple[float, int]:
    """exp(total NLL / scored tokens); each sequence alone (no padding), tokens 1..n-1 given their prefix."""
    model.eval()
    total_nll, scored = 0.0, 0
    for ids in sequences:
        input_ids = torch.tensor([ids], dtype=torch.long)                  # (1, n)
        logits = model(input_ids=input_ids).logits[0, :-1].float()         # (n-1, V): position t predicts t+1
        total_nll += F.cross_entropy(logits, input_ids[0, 1:], reduction="sum").double().item()
        scored += len(ids) - 1
    return math.exp(total_nll / scored), scored
