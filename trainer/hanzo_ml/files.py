"""Durable file writes and checksums: everything the trainer hands back is written so that a reader sees the old
file or the new one, never half of one."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, TypeVar

from hanzo_ml.errors import InputError

T = TypeVar("T")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_entries(root: Path, exclude: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """`{path, size_bytes, sha256}` for every file under root (paths relative, '/'-separated, sorted)."""
    entries = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        relative = path.relative_to(root).as_posix()
        if relative in exclude:
            continue
        entries.append({"path": relative, "size_bytes": path.stat().st_size, "sha256": sha256_file(path)})
    return entries


def fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    """Make a rename or a new entry in `path` durable (a file's fsync does not cover its directory entry)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            fsync_file(path)
    for directory in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        fsync_dir(directory)
    fsync_dir(root)


def dumps_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=False, allow_nan=False) + "\n"


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a sibling temp file, fsync, rename over the target, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def atomic_write_json(path: Path, value: Any) -> None:
    atomic_write_text(path, dumps_json(value))


def replace_dir(tmp: Path, final: Path) -> None:
    """Move a finished directory into place, replacing whatever was there (a stale or damaged copy)."""
    fsync_tree(tmp)
    if final.exists():
        old = final.with_name(f".old-{final.name}-{os.getpid()}")
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old)
    else:
        os.rename(tmp, final)
    fsync_dir(final.parent)


def read_jsonl_records(path: Path, parse: Callable[[str, str], T], allow_empty: bool = False) -> list[T]:
    """Every non-blank line of a JSONL file through `parse(line, "path:line")`; the first bad record raises
    InputError naming its line. allow_empty: a small dataset may leave a split empty, which is fine for counting
    but not for training."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    records = [parse(line, f"{path}:{number}") for number, line in enumerate(lines, start=1) if line.strip()]
    if not records and not allow_empty:
        raise InputError(f"{path}: no records")
    return records


def require_unique_ids(path: Path, records: list) -> list:
    """Records with an `id` attribute, each id once; a repeat raises InputError naming both records."""
    seen: dict[str, int] = {}
    for number, record in enumerate(records, start=1):
        if record.id in seen:
            raise InputError(f"{path}: id: '{record.id}' is used twice (records {seen[record.id]} and {number})")
        seen[record.id] = number
    return records
