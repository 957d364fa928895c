"""prepare-dataset's progress while it reads: work_dir/progress.json, which the job runner copies to the job's
progress.json in the store (as it does a train job's) and the worker reads on every poll.

    {"stage": "reading", "records_read": 120000, "bytes_read": 52428800, "bytes_total": 209715200,
     "at": "2026-11-27T08:00:00Z"}

bytes_read is how far into the input files (as stored: compressed bytes for .gz/.zst) the reader is, from the
offset of the source file this process has open (Linux's /proc/self/fdinfo); null where that cannot be told (no
/proc, or a reader that does not move the file offset), so a percentage is shown only when it means something.
The file is replaced (never half written) at most every EVERY_S seconds, and once more when reading is done.
"""
from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator, TypeVar

from hanzo_ml.files import atomic_write_json

T = TypeVar("T")

EVERY_S = 1.0
CHECK_EVERY = 256  # records between looks at the clock


class InputFiles:
    """The sources' files in reading order: each one's size and the bytes of the files before it."""

    def __init__(self, paths: Iterable[str | os.PathLike]):
        self.before: dict[str, int] = {}
        self.size: dict[str, int] = {}
        total = 0
        for path in paths:
            for file in files_under(Path(path)):
                real = os.path.realpath(file)
                if real in self.size:
                    continue
                self.before[real], self.size[real] = total, file.stat().st_size
                total += self.size[real]
        self.total = total

    def bytes_read(self, offset_of: Callable[[set[str]], tuple[str, int] | None]) -> int | None:
        found = offset_of(set(self.size))
        if found is None:
            return None
        path, offset = found
        return self.before[path] + min(offset, self.size[path])


def files_under(path: Path) -> list[Path]:
    """A file, or every file under a directory in sorted order (as the reader goes through one); [] if missing
    (the reader reports that)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    return sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))


def open_offset(paths: set[str]) -> tuple[str, int] | None:
    """(path, offset) of one of `paths` this process has open, the one read furthest into; None if none is."""
    best: tuple[str, int] | None = None
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target not in paths:
                continue
            with open(f"/proc/self/fdinfo/{fd}", encoding="ascii") as info:
                offset = next(int(line.split()[1]) for line in info if line.startswith("pos:"))
        except (OSError, StopIteration, ValueError):
            continue
        if best is None or offset > best[1]:
            best = (target, offset)
    return best


class ProgressFile:
    """Writes the reading progress, at a bounded rate; bytes_read never goes back."""

    def __init__(self, path: Path, inputs: InputFiles, every_s: float | None = None,
                 offset_of: Callable[[set[str]], tuple[str, int] | None] = open_offset):
        self.path, self.inputs, self.offset_of = path, inputs, offset_of
        self.every_s = EVERY_S if every_s is None else every_s
        self.records = 0
        self.bytes: int | None = None
        self.looked = False
        self.written_at = float("-inf")

    def tick(self, records: int) -> None:
        self.records = records
        # The first look, with the file open, tells the share read at once; after it, at most every every_s.
        if not self.looked or time.monotonic() - self.written_at >= self.every_s:
            self.looked = True
            self.write()

    def write(self, done: bool = False) -> None:
        now = self.inputs.total if done else self.inputs.bytes_read(self.offset_of)
        if now is not None and (now > 0 or done):
            self.bytes = max(self.bytes or 0, now)
        atomic_write_json(self.path, {
            "stage": "reading",
            "records_read": self.records,
            "bytes_read": self.bytes,
            "bytes_total": self.inputs.total,
            "at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        })
        self.written_at = time.monotonic()


def reading_progress(records: Iterable[T], spec) -> Iterator[T]:
    """The records as they are read, counted into work_dir/progress.json on the way."""
    progress = ProgressFile(Path(spec.work_dir) / "progress.json", InputFiles(s.path for s in spec.sources))
    progress.write()
    n, check_every = 0, CHECK_EVERY
    for record in records:
        n += 1
        if n % check_every == 0:
            progress.tick(n)
        yield record
    progress.records = n
    progress.write(done=True)
