"""dedup_exact: drop a record equal to an earlier one (its canonical bytes), and with against_parents to one in
an earlier version. The keys live in an SQLite table in work_dir, so memory stays flat however many records pass;
a key is the first 16 bytes of the record's sha256 (as the upload's dedup: 128 bits, collisions practically never).
Records are decided a chunk at a time: one lookup of the chunk's keys and one batched insert of the new ones (a
statement a record cost more than the hashing), the chunk's own repeats told apart in memory, in input order.
"""
from __future__ import annotations

import hashlib
import sqlite3
import tempfile
from pathlib import Path
from typing import Iterator

from hanzo_ml.dataprep.ops import Stage, chunked
from hanzo_ml.dataprep.records import Record

CHUNK = 1024  # records decided together
LOOKUP = 500  # keys a SELECT names (under every SQLite build's limit on bound parameters)


class KeyStore:
    """A set of 16-byte keys on disk; `add` says whether the key is new."""

    def __init__(self, work_dir: Path, cache_mb: int):
        self.dir = tempfile.TemporaryDirectory(dir=work_dir, prefix="dedup-exact-")
        self.db = sqlite3.connect(Path(self.dir.name) / "keys.sqlite", isolation_level=None)
        for pragma in ("journal_mode=OFF", "synchronous=OFF", "temp_store=FILE", f"cache_size=-{cache_mb * 1024}"):
            self.db.execute(f"PRAGMA {pragma}")
        self.db.execute("CREATE TABLE keys (k BLOB PRIMARY KEY) WITHOUT ROWID")

    def add_many(self, keys: list[bytes]) -> list[bool]:
        """Whether each key is new, in order (a key repeated within `keys` is new the first time only); the new
        ones are stored, in one transaction."""
        stored: set[bytes] = set()
        for start in range(0, len(keys), LOOKUP):
            part = keys[start:start + LOOKUP]
            stored.update(row[0] for row in self.db.execute(
                f"SELECT k FROM keys WHERE k IN ({','.join('?' * len(part))})", part))
        fresh = []
        for key in keys:
            fresh.append(key not in stored)
            stored.add(key)
        self.db.execute("BEGIN")
        self.db.executemany("INSERT INTO keys VALUES (?)", [(k,) for k, new in zip(keys, fresh) if new])
        self.db.execute("COMMIT")
        return fresh

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
        self.store = KeyStore(context.work_dir, cache_mb=max(16, context.memory_budget_mb // 16))

    def process(self, records: Iterator[Record]) -> Iterator[Record]:
        if self.params.get("against_parents"):
            parents = 0
            for chunk in chunked(self.context.parent_records(), CHUNK):
                self.store.add_many([record_key(record.line_json) for record in chunk])
                parents += len(chunk)
            self.details["parent_records"] = parents
        for chunk in chunked(records, CHUNK):
            for record, new in zip(chunk, self.store.add_many([record_key(r.line_json) for r in chunk])):
                if new:
                    yield record
                else:
                    self.removed += 1
        self.details["duplicates"] = self.removed

    def close(self) -> None:
        self.store.close()
