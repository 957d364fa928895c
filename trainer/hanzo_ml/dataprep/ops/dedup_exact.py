"""dedup_exact: drop a record equal to an earlier one (its canonical bytes), and with against_parents to one in
an earlier version. The keys live in an SQLite table in work_dir, so memory stays flat however many records pass;
a key is the first 16 bytes of the record's sha256 (as the upload's dedup: 128 bits, collisions practically never).
"""
from __future__ import annotations

import hashlib
import sqlite3
import tempfile
from pathlib import Path
from typing import Iterator

from hanzo_ml.dataprep.ops import Stage
from hanzo_ml.dataprep.records import Record

BATCH = 4096


class KeyStore:
    """A set of 16-byte keys on disk; `add` says whether the key is new."""

    def __init__(self, work_dir: Path, cache_mb: int):
        self.dir = tempfile.TemporaryDirectory(dir=work_dir, prefix="dedup-exact-")
        self.db = sqlite3.connect(Path(self.dir.name) / "keys.sqlite", isolation_level=None)
        for pragma in ("journal_mode=OFF", "synchronous=OFF", "temp_store=FILE", f"cache_size=-{cache_mb * 1024}"):
            self.db.execute(f"PRAGMA {pragma}")
        self.db.execute("CREATE TABLE keys (k BLOB PRIMARY KEY) WITHOUT ROWID")
        self.db.execute("BEGIN")
        self.pending = 0

    def add(self, key: bytes) -> bool:
        added = self.db.execute("INSERT OR IGNORE INTO keys VALUES (?)", (key,)).rowcount == 1
        self.pending += 1
        if self.pending >= BATCH:  # commit now and then so the page cache, not a huge transaction, holds work
            self.db.execute("COMMIT")
            self.db.execute("BEGIN")
            self.pending = 0
        return added

    def close(self) -> None:
        self.db.close()
        self.dir.cleanup()


def record_key(line: str) -> bytes:
    return hashlib.sha256(line.encode("utf-8", "surrogatepass")).digest()[:16]


class DedupExact(Stage):
    op = "dedup_exact"

    def __init__(self, params, context):
        super().__init__(params)
        self.context = context
        self.store = KeyStore(context.work_dir, cache_mb=max(16, context.memory_budget_mb // 8))

    def process(self, records: Iterator[Record]) -> Iterator[Record]:
        if self.params.get("against_parents"):
            parents = 0
            for record in self.context.parent_records():
                self.store.add(record_key(record.line_json))
                parents += 1
            self.details["parent_records"] = parents
        for record in records:
            if self.store.add(record_key(record.line_json)):
                yield record
            else:
                self.removed += 1
        self.details["duplicates"] = self.removed

    def close(self) -> None:
        self.store.close()
