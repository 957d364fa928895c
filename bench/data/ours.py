"""Our side of the data bench: the preparation chain over a chat JSONL file, streamed record by record.

    PYTHONPATH=trainer python bench/data/ours.py --input chat.jsonl --out-dir DIR [--memory-budget-mb 1024]

validate (JSON, messages with string role and content) -> mask_pii (every kind) -> exact dedup -> near dedup
(5-word shingles, 14 x 8, 0.72) -> length filter (words of the conversation). Writes DIR/kept.jsonl
({"id": line, "text": conversation}) and DIR/summary.json. Until `prepare-dataset` lands, this loop stands in for
the engine and calls the same two modules it calls (hanzo_ml.dataprep.pii, hanzo_ml.dataprep.near_dedup).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections import Counter
from pathlib import Path

from hanzo_ml.dataprep.near_dedup import NearDuplicateFilter
from hanzo_ml.dataprep.pii import PII_KINDS, PiiMasker


def conversation(record: dict, line: int) -> list[dict]:
    messages = record.get("messages") if isinstance(record, dict) else None
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"line {line}: messages: expected a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValueError(f"line {line}: messages[{i}]: expected role and content strings")
    return messages


def run(args: argparse.Namespace) -> dict:
    masker = PiiMasker(PII_KINDS)
    near = NearDuplicateFilter(shingle_words=5, bands=14, rows=8, threshold=0.72, seed=1, work_dir=args.out_dir / "work",
                               memory_budget_mb=args.memory_budget_mb)
    # Exact dedup keeps 8-byte digests in memory (about 70 bytes a record in a Python set): the one part of this
    # loop that grows with the input; the engine's exact dedup is its own.
    seen: set[bytes] = set()
    redactions: Counter = Counter()
    removed = Counter()
    records = 0
    timings = Counter()
    with open(args.input) as src, open(args.out_dir / "kept.jsonl", "w") as out:
        for line, raw in enumerate(src, start=1):
            records += 1
            t0 = time.perf_counter()
            messages = conversation(json.loads(raw), line)
            t1 = time.perf_counter()
            texts = []
            for m in messages:
                masked, counts = masker.mask(m["content"])
                redactions.update(counts)
                texts.append(masked)
            text = "\n".join(texts)
            t2 = time.perf_counter()
            digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
            t3 = time.perf_counter()
            timings["validate"] += t1 - t0
            timings["mask_pii"] += t2 - t1
            timings["dedup_exact"] += t3 - t2
            if digest in seen:
                removed["dedup_exact"] += 1
                continue
            seen.add(digest)
            duplicate = near.is_duplicate(text)
            timings["dedup_near"] += time.perf_counter() - t3
            if duplicate:
                removed["dedup_near"] += 1
                continue
            words = len(text.split())
            if not args.min_words <= words <= args.max_words:
                removed["filter"] += 1
                continue
            out.write(json.dumps({"id": line, "text": text}) + "\n")
    stats = near.stats()
    near.close()
    return {"records_in": records, "records_out": records - sum(removed.values()), "removed": dict(removed),
            "redactions": dict(redactions), "near_dedup": stats, "seconds_by_op": {k: round(v, 2) for k, v in timings.items()}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", type=Path, required=True)
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--memory-budget-mb", type=int, default=1024)
    ap.add_argument("--min-words", type=int, default=30)
    ap.add_argument("--max-words", type=int, default=150)
    args = ap.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    summary = run(args)
    summary["seconds"] = round(time.perf_counter() - start, 2)
    (args.out_dir / "summary.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
