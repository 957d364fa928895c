"""Checkpoint directories: atomic writes, manifest verification, choosing where to resume, pruning.

Layout under checkpoint_dir:
    step-00000040/              a complete checkpoint (its manifest.json was written last, then the dir renamed)
        manifest.json           {step, created_at, environment, files: [{path, size_bytes, sha256}]}
        ...                     whatever the recipe wrote (adapter, optimizer, scheduler, RNG, trainer state)
    best/                       a copy of the checkpoint with the lowest validation loss so far (manifest adds
                                eval_loss); pruning never touches it
    .tmp-step-00000050-<pid>/   a checkpoint being written, or left behind by a killed process (stale)

A checkpoint without a manifest that verifies does not exist: resume skips it, and pruning removes it.
The manifest's `environment.sha256` hashes trainer/requirements.lock (or, without it, the installed
distributions), so a resumed run can tell that the software under it changed.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from hanzo_ml.files import dumps_json, file_entries, fsync_dir, fsync_file, fsync_tree, sha256_file

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
TMP_PREFIX = ".tmp-"
NAME_PATTERN = re.compile(r"^step-(\d{8})$")
BEST = "best"
LOCK_FILE = Path(__file__).resolve().parents[1] / "requirements.lock"


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
    manifest = {"step": step, "created_at": utc_now(), "environment": environment(),
                "files": file_entries(tmp, exclude=(MANIFEST,))}
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
    """Every file the manifest lists exists with its size and sha256, and the step matches the name
    (best/ names no step: its manifest's step says which checkpoint it copies)."""
    manifest = read_manifest(path)
    if path.name != BEST and manifest["step"] != step_of(path):
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
    return find_resume_checkpoint(checkpoint_dir)[0]


def find_resume_checkpoint(checkpoint_dir: Path) -> tuple[Checkpoint | None, list[tuple[str, str]]]:
    """(the newest checkpoint that verifies, [(name, reason)] of the newer ones skipped because they do not)."""
    skipped = []
    for path in step_dirs(checkpoint_dir):
        try:
            return verify_checkpoint(path), skipped
        except CorruptCheckpoint as e:
            log.warning("skipping checkpoint %s: %s", path.name, e)
            skipped.append((path.name, str(e)))
    return None, skipped


def keep_as_best(checkpoint_dir: Path, source: Path, eval_loss: float) -> Path:
    """Copy a complete checkpoint to best/ (temp copy, manifest with eval_loss, fsync, swap in), so the best
    model survives keep_last pruning. The copied files keep their hashes; only the manifest is new."""
    manifest = read_manifest(source)
    tmp = checkpoint_dir / f"{TMP_PREFIX}{BEST}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(source, tmp, ignore=shutil.ignore_patterns(MANIFEST))
    fsync_tree(tmp)
    best_manifest = {**manifest, "eval_loss": eval_loss, "copy_of": source.name, "created_at": utc_now()}
    (tmp / MANIFEST).write_text(dumps_json(best_manifest), encoding="utf-8")
    fsync_file(tmp / MANIFEST)
    fsync_dir(tmp)
    final = checkpoint_dir / BEST
    old = checkpoint_dir / f"{TMP_PREFIX}old-{BEST}-{os.getpid()}"
    if final.exists():
        os.rename(final, old)  # a crash between the two renames leaves no best/ (resume never needs it)
    os.rename(tmp, final)
    fsync_dir(checkpoint_dir)
    if old.exists():
        shutil.rmtree(old)
    return final


def best_checkpoint(checkpoint_dir: Path) -> Checkpoint | None:
    """best/ if it verifies (its manifest carries eval_loss), else None."""
    path = checkpoint_dir / BEST
    if not path.is_dir():
        return None
    try:
        found = verify_checkpoint(path)
    except CorruptCheckpoint as e:
        log.warning("ignoring %s: %s", BEST, e)
        return None
    return found if isinstance(found.manifest.get("eval_loss"), (int, float)) else None


class CheckpointSchedule:
    """A checkpoint is due every `every_steps` optimizer steps, after `every_seconds` of wall time since the
    last one (a slow step must not stretch the gap between checkpoints to hours), and at the last step."""

    def __init__(self, every_steps: int, every_seconds: float | None, clock: Callable[[], float] = time.monotonic):
        self.every_steps, self.every_seconds, self.clock = every_steps, every_seconds, clock
        self.last_written = clock()

    def due(self, step: int, max_steps: int) -> str | None:
        """Why a checkpoint is due after `step` ('steps', 'interval', 'end'), or None."""
        if step == max_steps:
            return "end"
        if step % self.every_steps == 0:
            return "steps"
        if self.every_seconds is not None and self.clock() - self.last_written >= self.every_seconds:
            return "interval"
        return None

    def written(self) -> None:
        self.last_written = self.clock()


@lru_cache(maxsize=1)
def environment() -> dict:
    """{sha256, source}: the hash of the lock file the trainer's environment was built from, or, where there
    is none (an installed package), of every installed distribution's name==version."""
    if LOCK_FILE.is_file():
        return {"sha256": sha256_file(LOCK_FILE), "source": "requirements.lock"}
    from importlib.metadata import distributions

    pins = sorted({f"{d.metadata['Name']}=={d.version}".lower() for d in distributions() if d.metadata["Name"]})
    return {"sha256": hashlib.sha256("\n".join(pins).encode()).hexdigest(), "source": "installed distributions"}


def rng_states_with_cuda(base_states: dict) -> dict:
    """The CPU generators' states plus every CUDA device's, when there are any (spec: Python, NumPy, torch,
    CUDA)."""
    import torch

    if torch.cuda.is_available():
        return {**base_states, "cuda": torch.cuda.get_rng_state_all()}
    return base_states


def restore_cuda_rng(states: dict) -> None:
    import torch

    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def prune_checkpoints(checkpoint_dir: Path, keep_last: int) -> list[Path]:
    """Keep the newest keep_last complete checkpoints; delete older ones, incomplete ones and stale temp dirs.

    Complete means the manifest is present and readable: it is written last inside the temp dir, so its presence
    after the rename proves the write finished. (Bit rot is resume's business: it re-hashes before trusting.)
    Only one trainer writes to a checkpoint_dir, and it calls this after its own rename, so every temp dir here
    belongs to a process that died. best/ is not a step-* directory and is never pruned.
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
