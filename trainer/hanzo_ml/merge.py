"""Merge a LoRA adapter into its base and compute the reference perplexity the Candle tool must reproduce.

    python -m hanzo_ml merge --spec job.json

Writes:
    <output_dir>/                       merged model: float32 safetensors, config.json, tokenizer files
    <output_dir>/../heldout-tokens.json {"sequences": [[ids...]], "target_mask": [[0|1...]]}: the rendered
                                        held-out conversations, assistant turns flagged
    <general_tokens_path>               {"sequences": [[ids...]]}: general text (capability retention), when
                                        general_path is given
    <reference_path>                    MergeReport

Reference perplexity, defined so that another implementation can reproduce it exactly: for each sequence of n
tokens, score each flagged token j (1 <= j < n) given tokens 0..j-1, one sequence at a time, no padding, no BOS
beyond what the ids hold; ppl = exp(sum of NLL over scored tokens / number of scored tokens). On the held-out
conversations only the assistant turns are flagged: they are what the fine-tune is trained to produce, while the
system and user turns are text no chat model learns to write (scoring them gave thousands for a healthy model).
On general text every token is scored. Sequences with nothing to score are left out of the files.
"""
from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

import torch
import torch.nn.functional as F

from hanzo_ml.chat import IGNORE_INDEX, encode_text, label_assistant_turns, load_tokenizer, read_chat_jsonl
from hanzo_ml.errors import InputError
from hanzo_ml.files import atomic_write_json, dumps_json, file_entries, replace_dir
from hanzo_ml.modeling import configure_torch, load_causal_lm
from hanzo_ml.spec import require_existing

log = logging.getLogger(__name__)


def merge(spec, spec_path: Path) -> dict:
    require_existing(spec_path, "base_model_path", spec.base_model_path, kind="dir")
    require_existing(spec_path, "adapter_path", spec.adapter_path, kind="dir")
    require_existing(spec_path, "heldout_path", spec.heldout_path)
    general_path = getattr(spec, "general_path", None)
    require_existing(spec_path, "general_path", general_path)
    tokenizer = load_tokenizer(Path(spec.base_model_path))
    conversations = read_chat_jsonl(Path(spec.heldout_path))[: spec.max_sequences]
    heldout = assistant_targets(tokenizer, conversations, spec.max_seq_length, spec.heldout_path)
    general = general_sequences(tokenizer, Path(general_path), spec.max_sequences, spec.max_seq_length) \
        if general_path else None

    configure_torch(spec.threads)
    output_dir = Path(spec.output_dir)
    merged_model = merge_adapter(Path(spec.base_model_path), Path(spec.adapter_path))
    write_merged_dir(merged_model, tokenizer, output_dir)
    del merged_model

    heldout_tokens_path = Path(spec.heldout_tokens_path) if getattr(spec, "heldout_tokens_path", None) \
        else output_dir.parent / "heldout-tokens.json"
    atomic_write_json(heldout_tokens_path, heldout)
    # Score the files as written, not the in-memory model: the reference must describe what ships.
    merged_model = load_causal_lm(output_dir)
    perplexity, num_tokens = reference_perplexity(merged_model, heldout["sequences"], heldout["target_mask"])
    log.info("reference perplexity %.4f over %d assistant tokens of %d sequences", perplexity, num_tokens,
             len(heldout["sequences"]))
    report = {
        "merged_dir": str(output_dir),
        "heldout_tokens_path": str(heldout_tokens_path),
        "reference_perplexity": perplexity,
        "num_tokens": num_tokens,
        "general_tokens_path": None,
        "general_reference_perplexity": None,
        "general_num_tokens": None,
        "base_general_perplexity": None,
        "files": file_entries(output_dir),
    }
    if general:
        report.update(general_report(spec, output_dir, merged_model, general))
    atomic_write_json(Path(spec.reference_path), report)
    return report


def assistant_targets(tokenizer, conversations, max_seq_length: int, name: str) -> dict:
    """Token ids of each conversation with a 0/1 flag per token: 1 on the assistant turns (the training labels)."""
    sequences, masks = [], []
    for messages in conversations:
        example = label_assistant_turns(tokenizer, messages).truncated(max_seq_length)
        mask = [int(label != IGNORE_INDEX) for label in example.labels]
        if any(mask[1:]):
            sequences.append(example.input_ids)
            masks.append(mask)
    if not sequences:
        raise InputError(f"{name}: no record keeps an assistant token within max_seq_length={max_seq_length}")
    return {"sequences": sequences, "target_mask": masks}


def general_sequences(tokenizer, path: Path, max_sequences: int, max_seq_length: int) -> list[list[int]]:
    """Documents of a plain-text file (separated by blank lines), or of a chat JSONL file (a dataset version's
    split: each record's messages, joined by new lines, are one document), each encoded and cut to max_seq_length."""
    documents = general_documents(path)[:max_sequences]
    sequences = [ids for ids in (encode_text(tokenizer, d)[:max_seq_length] for d in documents) if len(ids) >= 2]
    if not sequences:
        raise InputError(f"{path}: no document (blank-line separated) encodes to 2 or more tokens")
    return sequences


def general_documents(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    # A job input's file name need not keep its extension: a chat file is told by its first record.
    if text.lstrip().startswith('{"messages"'):
        return ["\n".join(m["content"] for m in messages) for messages in read_chat_jsonl(path)]
    return [d.strip() for d in text.split("\n\n") if d.strip()]


def general_report(spec, output_dir: Path, merged_model, sequences: list[list[int]]) -> dict:
    """Capability retention: the merged model and its base on the same general text."""
    path = Path(spec.general_tokens_path) if getattr(spec, "general_tokens_path", None) \
        else output_dir.parent / "general-tokens.json"
    atomic_write_json(path, {"sequences": sequences})
    merged, num_tokens = reference_perplexity(merged_model, sequences)
    base, _ = reference_perplexity(load_causal_lm(Path(spec.base_model_path)), sequences)
    log.info("general-text perplexity %.4f (base %.4f) over %d tokens", merged, base, num_tokens)
    return {"general_tokens_path": str(path), "general_reference_perplexity": merged,
            "general_num_tokens": num_tokens, "base_general_perplexity": base}


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


def reference_perplexity(model, sequences: list[list[int]], masks: list[list[int]] | None = None
                         ) -> tuple[float, int]:
    """exp(total NLL / scored tokens); each sequence alone (no padding), each flagged token j >= 1 given its
    prefix (every token j >= 1 without masks)."""
    scored = sequence_nlls(model, sequences, masks)
    total_nll, num_tokens = sum(n for n, _ in scored), sum(t for _, t in scored)
    return math.exp(total_nll / num_tokens), num_tokens


@torch.no_grad()
def sequence_nlls(model, sequences: list[list[int]], masks: list[list[int]] | None = None
                  ) -> list[tuple[float, int]]:
    """Per sequence: (summed NLL of its scored tokens, number of scored tokens), one sequence at a time."""
    model.eval()
    out = []
    for i, ids in enumerate(sequences):
        input_ids = torch.tensor([ids], dtype=torch.long)                  # (1, n)
        logits = model(input_ids=input_ids).logits[0, :-1].float()         # (n-1, V): position t predicts t+1
        nll = F.cross_entropy(logits, input_ids[0, 1:], reduction="none").double()  # (n-1,)
        flags = torch.tensor(masks[i][1:], dtype=torch.bool) if masks else torch.ones(len(ids) - 1, dtype=torch.bool)
        out.append((nll[flags].sum().item(), int(flags.sum())))
    return out
