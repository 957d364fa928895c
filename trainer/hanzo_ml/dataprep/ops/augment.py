"""augment: oversample_minority repeats each smaller class's records until the class is as large as the largest;
shuffle_seed reorders the records deterministically. Both spill to work_dir, so memory stays bounded:
oversampling spools the records once to count the classes, and the shuffle is external: every record goes to one
of BUCKETS files by a seeded hash of (position, record), then each bucket is sorted by that hash in memory (a
bucket over a quarter of memory_budget_mb is split further first).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Iterator

from hanzo_ml.dataprep.ops import Stage
from hanzo_ml.dataprep.records import Record

BUCKETS = 256  # one per value of a key byte
MAX_DEPTH = 4  # 256 ** 3 buckets of a quarter of the budget each: far beyond any disk


def bucket_of(key: str, depth: int) -> int:
    """The bucket of a hex key at a depth: its depth-th byte (so the buckets in order are the keys in order)."""
    return int(key[2 * depth:2 * depth + 2], 16)
MISSING = "expected a value for the oversample_minority field (every record needs a class)"


class Augment(Stage):
    op = "augment"

    def __init__(self, params, context):
        super().__init__(params)
        self.context = context
        self.dir = tempfile.TemporaryDirectory(dir=context.work_dir, prefix="augment-")

    def process(self, records: Iterator[Record]) -> Iterator[Record]:
        oversample = self.params.get("oversample_minority")
        if oversample:
            records = self.oversampled(records, oversample["field"])
        if self.params.get("shuffle_seed") is not None:
            records = self.shuffled(records, self.params["shuffle_seed"])
        yield from records

    def oversampled(self, records: Iterator[Record], field: str) -> Iterator[Record]:
        spool = Path(self.dir.name) / "oversample.jsonl"
        counts: Counter = Counter()
        with open(spool, "w", encoding="utf-8", errors="surrogatepass") as out:
            for record in records:
                if record.extra.get(field) is None:
                    self.context.log.add(record.file, record.line, field, MISSING)
                    continue
                counts[class_of(record, field)] += 1
                out.write(record.to_spool() + "\n")
        largest = max(counts.values(), default=0)
        self.added = sum(largest - n for n in counts.values())
        self.details["classes"] = {cls: {"records": n, "repeated_to": largest} for cls, n in sorted(counts.items())}
        seen: Counter = Counter()
        with open(spool, encoding="utf-8", errors="surrogatepass") as lines:
            for line in lines:
                record = Record.from_spool(line)
                cls = class_of(record, field)
                copies = largest // counts[cls] + (1 if seen[cls] < largest % counts[cls] else 0)
                seen[cls] += 1
                for _ in range(copies):
                    yield record
        os.unlink(spool)

    def shuffled(self, records: Iterator[Record], seed: int) -> Iterator[Record]:
        paths = [Path(self.dir.name) / f"bucket-{i:03d}.jsonl" for i in range(BUCKETS)]
        outs = [open(p, "w", encoding="utf-8", errors="surrogatepass") for p in paths]
        try:
            for position, record in enumerate(records):
                line = record.to_spool()
                key = hashlib.sha256(f"{seed}:{position}:{record.line_json}"
                                     .encode("utf-8", "surrogatepass")).hexdigest()
                outs[bucket_of(key, 0)].write(f"{key}\t{line}\n")
        finally:
            for out in outs:
                out.close()
        limit = (self.context.memory_budget_mb << 20) // 4
        for path in paths:
            yield from self.sorted_bucket(path, 1, limit)

    def sorted_bucket(self, path: Path, depth: int, limit: int) -> Iterator[Record]:
        """A bucket's records in key order. One larger than `limit` bytes is split again by the next byte of
        the key (keys are hex, so the sub-buckets in order are the bucket in order) until each part fits."""
        if path.stat().st_size > limit and depth < MAX_DEPTH:
            outs: dict[int, object] = {}  # opened as needed: a sparse bucket makes few files
            try:
                with open(path, encoding="utf-8", errors="surrogatepass") as bucket:
                    for entry in bucket:
                        part = bucket_of(entry, depth)
                        if part not in outs:
                            outs[part] = open(path.with_name(f"{path.stem}-{part:03d}.jsonl"), "w",
                                              encoding="utf-8", errors="surrogatepass")
                        outs[part].write(entry)
            finally:
                for out in outs.values():
                    out.close()
            os.unlink(path)
            for part in sorted(outs):
                yield from self.sorted_bucket(path.with_name(f"{path.stem}-{part:03d}.jsonl"), depth + 1, limit)
            return
        with open(path, encoding="utf-8", errors="surrogatepass") as bucket:
            entries = sorted(line.split("\t", 1) for line in bucket)
        os.unlink(path)
        for _, line in entries:
            yield Record.from_spool(line)

    def close(self) -> None:
        self.dir.cleanup()


def class_of(record: Record, field: str) -> str:
    value = record.extra[field]
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
