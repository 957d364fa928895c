"""Token counts per split, for cost estimates before any GPU time is spent.

    python -m hanzo_ml count-tokens --spec job.json

Tokenizer only: this module must not import torch, so it starts in about a second. Counts the tokens of each
record's whole rendered conversation (the chat template of the model's tokenizer), as training will see it
before truncation. Writes a TokenCountReport.
"""
from __future__ import annotations

import logging
from pathlib import Path

from hanzo_ml.chat import encode_conversation, load_tokenizer, read_chat_jsonl
from hanzo_ml.files import atomic_write_json, sha256_file
from hanzo_ml.spec import require_existing

log = logging.getLogger(__name__)


def count_tokens(spec, spec_path: Path) -> dict:
    require_existing(spec_path, "tokenizer_path", spec.tokenizer_path, kind="dir")
    for split, path in spec.inputs.items():
        require_existing(spec_path, f"inputs.{split}", path)
    tokenizer = load_tokenizer(Path(spec.tokenizer_path))
    splits = {}
    for split, path in spec.inputs.items():
        conversations = read_chat_jsonl(Path(path), allow_empty=True)
        tokens = sum(len(encode_conversation(tokenizer, messages)) for messages in conversations)
        splits[split] = {"records": len(conversations), "tokens": tokens}
        log.info("%s: %d records, %d tokens", split, len(conversations), tokens)
    report = {"tokenizer_sha256": sha256_file(Path(spec.tokenizer_path) / "tokenizer.json"), "splits": splits}
    atomic_write_json(Path(spec.output_path), report)
    return report
