"""Dealing records into train / validation / test files, exactly as datasets/ingest/splits.ts does.

A record's split is a pure function of (seed, record): sha256 of `${seed}:` + its canonical line, the first 48
bits read as a number in [0, 1), compared with the cumulative ratios (a split with ratio 0 never receives one).
With two or more records, train and test each get at least one when their ratio is non-zero: test takes the record
with the highest hash, train the one with the lowest. Without ratios (split: null) a record stays in the split its
source belongs to (split_of).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from hanzo_ml.dataprep.records import Record

SPLIT_NAMES = ("train", "validation", "test")
FLUSH_BYTES = 1 << 20


class SplitWriter:
    """One split file; its record count, size and sha256 are computed from the bytes as they are written."""

    def __init__(self, path: Path):
        self.path = path
        self.file = open(path, "xb")
        self.hash = hashlib.sha256()
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        self.records = 0
        self.bytes = 0

    def add(self, line: str) -> None:
        data = (line + "\n").encode("utf-8")
        self.hash.update(data)
        self.pending.append(data)
        self.pending_bytes += len(data)
        self.bytes += len(data)
        self.records += 1
        if self.pending_bytes >= FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        self.file.write(b"".join(self.pending))
        self.pending, self.pending_bytes = [], 0

    def close(self) -> dict:
        self.flush()
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        return {"path": self.path.name, "records": self.records, "size_bytes": self.bytes,
                "sha256": self.hash.hexdigest()}


def split_fraction(key: bytes) -> float:
    return int.from_bytes(key[:6], "big") / 2 ** 48


def assign_split(fraction: float, ratios: dict[str, float]) -> str:
    cumulative = 0.0
    last = "train"
    for name in SPLIT_NAMES:
        if ratios[name] <= 0:
            continue
        cumulative += ratios[name]
        last = name
        if fraction < cumulative:
            return name
    return last


class SplitSink:
    def __init__(self, directory: Path, ratios: dict[str, float] | None, seed: int, split_of: dict[str, str],
                 tokenized=None):
        """tokenized: a tokenized.TokenizedSplits that receives each record's rows with its line (or None)."""
        self.dir = directory
        self.tokenized = tokenized
        # finish() moved a record between splits (or one came without rows): the rows written beside the lines
        # do not match the split files, and the tokenize pass makes them from the files instead
        self.moved = False
        self.ratios = ratios
        self.seed = seed
        self.split_of = split_of
        self.writers = {name: SplitWriter(directory / f"{name}.jsonl") for name in SPLIT_NAMES}
        self.lowest: tuple[bytes, str, str, int] | None = None   # (key, line, split, tokens)
        self.highest: tuple[bytes, str, str, int] | None = None
        self.tokens = dict.fromkeys(SPLIT_NAMES, 0)
        self.records = 0

    def add(self, record: Record, tokens: int = 0) -> None:
        """tokens: the record's count (count-tokens'), summed per split and moved with it when rebalancing;
        record.encoded, when a tokenize operation made it, goes to the split's tokenized file."""
        line = record.line_json
        if self.ratios is None:
            split = record.split or self.split_of[record.source]
        else:
            key = hashlib.sha256(f"{self.seed}:{line}".encode("utf-8")).digest()
            split = assign_split(split_fraction(key), self.ratios)
            if self.lowest is None or key < self.lowest[0]:
                self.lowest = (key, line, split, tokens)
            if self.highest is None or key > self.highest[0]:
                self.highest = (key, line, split, tokens)
        self.writers[split].add(line)
        if self.tokenized is not None and record.encoded is not None:
            self.tokenized.add(split, record.encoded)
        elif self.tokenized is not None:
            self.moved = True  # a record came without rows: the tokenize pass makes them from the split files
        self.tokens[split] += tokens
        self.records += 1

    def finish(self) -> dict[str, dict]:
        """{split: {path, records, size_bytes, sha256, tokens}}."""
        files = {name: writer.close() for name, writer in self.writers.items()}
        if self.ratios is not None and self.records >= 2:
            if self.ratios["test"] > 0 and files["test"]["records"] == 0:
                self.move(files, self.highest, "test")
            if self.ratios["train"] > 0 and files["train"]["records"] == 0:
                self.move(files, self.lowest, "train")
        return {name: {**info, "tokens": self.tokens[name]} for name, info in files.items()}

    def move(self, files: dict[str, dict], placed: tuple[bytes, str, str, int], to: str) -> None:
        _, line, split, tokens = placed
        self.moved = True
        before = files[split]["records"]
        files[split] = self.rewrite(files[split], remove=line)
        files[to] = self.rewrite(files[to], append=line)
        self.tokens[split] -= tokens * (before - files[split]["records"])  # every copy left (none after dedup)
        self.tokens[to] += tokens

    def rewrite(self, info: dict, remove: str | None = None, append: str | None = None) -> dict:
        path = self.dir / info["path"]
        following = SplitWriter(path.with_name(path.name + ".next"))
        with open(path, encoding="utf-8") as lines:
            for raw in lines:
                line = raw[:-1]
                if line != remove:
                    following.add(line)
        if append is not None:
            following.add(append)
        rewritten = following.close()
        os.replace(following.path, path)
        return {**rewritten, "path": info["path"]}

    def discard(self) -> None:
        for writer in self.writers.values():
            if not writer.file.closed:
                writer.file.close()
