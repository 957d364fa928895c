"""Checkpoint directories: atomic writes, manifest verification, choosing where to resume, pruning.

Layout under checkpoint_dir:
    step-00000040/              a complete checkpoint (its manifest.json was written last, then the dir renamed)
        manifest.json           {step, created_at, files: [{path, size_bytes, sha256}]}  (CheckpointManifest)
        ...                     whatever the recipe wrote (adapter, optimizer, scheduler, RNG, trainer state)
    .tmp-step-00000050-<pid>/   a checkpoint being written, or left behind by a killed process (stale)

A checkpoint without a manifest that verifies does not exist: resume skips it, and pruning removes it.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hanzo_ml.files import dumps_json, file_entries, fsync_dir, fsync_file, fsync_tree, sha256_file

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
TMP_PREFIX = ".tmp-"
NAME_PATTERN = re.compile(r"^step-(\d{8})$")


class CorruptCheckpoint(Exception):
    pass


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int
    manifest: dict


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


def step_of(path: Path) -> int | None:
    match = NAME_PATTERN.match(path.name)
    return int(match.group(1)) if match else None


def save_checkpoint(checkpoint_dir: Path, step: int, write_contents: Callable[[Path], None]) -> Path:
    """Write a checkpoint atomically: contents into a temp dir, fsync, manifest last, fsync, rename.

    A step directory that already exists here can only be a damaged copy (resume chose an older checkpoint over
    it) or the same step written again; either way the new one replaces it.
    """
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    final = checkpoint_dir / checkpoint_name(step)
    tmp = checkpoint_dir / f"{TMP_PREFIX}{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    write_contents(tmp)
    fsync_tree(tmp)  # the bytes the manifest vouches for must be on disk before the manifest is
    manifest = {"step": step, "created_at": utc_now(), "files": file_entries(tmp, exclude=(MANIFEST,))}
    (tmp / MANIFEST).write_text(dumps_json(manifest), encoding="utf-8")
    fsync_file(tmp / MANIFEST)
    fsync_dir(tmp)
    if final.exists():
        shutil.rmtree(final)
    os.rename(tmp, final)
    fsync_dir(checkpoint_dir)
    return final


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def read_manifest(path: Path) -> dict:
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise CorruptCheckpoint("no manifest.json (incomplete)") from e
    except (OSError, json.JSONDecodeError) as e:
        raise CorruptCheckpoint(f"unreadable manifest.json: {e}") from e
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list) or "step" not in manifest:
        raise CorruptCheckpoint("manifest.json lacks step or files")
    return manifest


def verify_checkpoint(path: Path) -> Checkpoint:
    """Every file the manifest lists exists with its size and sha256, and the step matches the name."""
    manifest = read_manifest(path)
    if manifest["step"] != step_of(path):
        raise CorruptCheckpoint(f"manifest step {manifest['step']} does not match the directory name")
    for entry in manifest["files"]:
        file = path / entry["path"]
        if not file.is_file():
            raise CorruptCheckpoint(f"{entry['path']}: missing")
        if file.stat().st_size != entry["size_bytes"]:
            raise CorruptCheckpoint(f"{entry['path']}: {file.stat().st_size} bytes, manifest says "
                                    f"{entry['size_bytes']}")
        if sha256_file(file) != entry["sha256"]:
            raise CorruptCheckpoint(f"{entry['path']}: sha256 does not match the manifest")
    return Checkpoint(path=path, step=manifest["step"], manifest=manifest)


def step_dirs(checkpoint_dir: Path) -> list[Path]:
    """step-* directories, newest first."""
    if not checkpoint_dir.is_dir():
        return []
    dirs = [p for p in checkpoint_dir.iterdir() if p.is_dir() and step_of(p) is not None]
    return sorted(dirs, key=step_of, reverse=True)


def latest_valid_checkpoint(checkpoint_dir: Path) -> Checkpoint | None:
    """The newest checkpoint that verifies; newer ones that do not are logged and skipped."""
    for path in step_dirs(checkpoint_dir):
        try:
            return verify_checkpoint(path)
        except CorruptCheckpoint as e:
            log.warning("skipping checkpoint %s: %s", path.name, e)
    return None


def prune_checkpoints(checkpoint_dir: Path, keep_last: int) -> list[Path]:
    """Keep the newest keep_last complete checkpoints; delete older ones, incomplete ones and stale temp dirs.

    Complete means the manifest is present and readable: it is written last inside the temp dir, so its presence
    after the rename proves the write finished. (Bit rot is resume's business: it re-hashes before trusting.)
    Only one trainer writes to a checkpoint_dir, and it calls this after its own rename, so every temp dir here
    belongs to a process that died.
    """
    removed = remove_temp_dirs(checkpoint_dir)
    kept = 0
    for path in step_dirs(checkpoint_dir):
        try:
            read_manifest(path)
            complete = True
        except CorruptCheckpoint:
            complete = False
        if complete and kept < keep_last:
            kept += 1
            continue
        shutil.rmtree(path)
        removed.append(path)
    for path in removed:
        log.info("removed checkpoint directory %s", path.name)
    return removed


def remove_temp_dirs(checkpoint_dir: Path) -> list[Path]:
    """Temp dirs left by a process that died mid-write; never a checkpoint, only wasted space."""
    stale = [p for p in checkpoint_dir.iterdir() if p.is_dir() and p.name.startswith(TMP_PREFIX)] \
        if checkpoint_dir.is_dir() else []
    for path in stale:
        shutil.rmtree(path)
    return stale
