"""Checkpoints between the trainer's local directory and the store.

    local  {scratch}/checkpoints/step-00000040/   the trainer's layout (hanzo_ml/checkpoint.py), renamed into
                                  best/                place whole, manifest.json written last inside
    store  {checkpoints_uri}/40/                  the same files; manifest.json uploaded last
                             best/

In the store, as on disk, a checkpoint is complete when its manifest.json exists and every file the manifest lists
is there with the listed size: an upload cut short leaves a prefix without a manifest, which no reader takes for a
checkpoint. (The trainer re-hashes every file before it resumes from one, so sizes are enough here.)

Before the trainer starts, `restore_newest` brings the newest complete checkpoint of the store down, unless the
local directory already has one as new (a restart in the same scratch). While it runs, `CheckpointMirror.sync`
copies each new local checkpoint up and removes from the store the ones the trainer pruned (keep_last).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from hanzo_ml import checkpoint as ckpt
from hanzo_ml.files import replace_dir
from hanzo_ml.jobio.store import ObjectStore, join

log = logging.getLogger(__name__)

MANIFEST = ckpt.MANIFEST
BEST = ckpt.BEST


@dataclass(frozen=True)
class StoredCheckpoint:
    name: str            # the store's directory name: the step as a plain integer, or "best"
    manifest_text: str   # exactly the manifest uploaded, so a local copy can be compared byte for byte

    @property
    def manifest(self) -> dict:
        return json.loads(self.manifest_text)


def remote_name(local_name: str) -> str:
    """"step-00000040" -> "40"; "best" -> "best"."""
    return BEST if local_name == BEST else str(ckpt.step_of(Path(local_name)))


def local_name(remote: str) -> str:
    return BEST if remote == BEST else ckpt.checkpoint_name(int(remote))


def stored_objects(store: ObjectStore, uri: str) -> dict[str, dict[str, int]]:
    """{checkpoint directory name: {path inside it: size}} for everything under the checkpoints URI."""
    grouped: dict[str, dict[str, int]] = {}
    for path, size in store.list(uri).items():
        name, _, inner = path.partition("/")
        if inner:
            grouped.setdefault(name, {})[inner] = size
    return grouped


def complete_in_store(store: ObjectStore, uri: str, name: str, objects: dict[str, int]) -> StoredCheckpoint | None:
    if MANIFEST not in objects:
        return None
    text = store.read_text(join(uri, name, MANIFEST))
    try:
        files = json.loads(text)["files"] if text is not None else None
        complete = files is not None and all(objects.get(f["path"]) == f["size_bytes"] for f in files)
    except (json.JSONDecodeError, KeyError, TypeError):
        complete = False
    return StoredCheckpoint(name, text) if complete else None


def newest_in_store(store: ObjectStore, uri: str, grouped: dict[str, dict[str, int]]) -> StoredCheckpoint | None:
    for name in sorted((n for n in grouped if n.isdigit()), key=int, reverse=True):
        found = complete_in_store(store, uri, name, grouped[name])
        if found is not None:
            return found
        log.warning("checkpoint %s in the store is incomplete; looking at older ones", join(uri, name))
    return None


def local_manifest_text(path: Path) -> str | None:
    """The manifest of a complete local checkpoint directory (every listed file there, listed size), or None."""
    try:
        text = (path / MANIFEST).read_text(encoding="utf-8")
        files = json.loads(text)["files"]
        if all((path / f["path"]).stat().st_size == f["size_bytes"] for f in files):
            return text
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        pass
    return None


def newest_local_step(local_dir: Path) -> int | None:
    for path in ckpt.step_dirs(local_dir):
        if local_manifest_text(path) is not None:
            return ckpt.step_of(path)
    return None


def restore_newest(store: ObjectStore, uri: str, local_dir: Path) -> int | None:
    """Download the store's newest complete checkpoint (and best/) unless the local directory has one at least
    as new. Returns the step the trainer will find, if any."""
    local_dir.mkdir(parents=True, exist_ok=True)
    grouped = stored_objects(store, uri)
    newest = newest_in_store(store, uri, grouped)
    local_step = newest_local_step(local_dir)
    downloaded = newest is not None and (local_step is None or int(newest.name) > local_step)
    if downloaded:
        download(store, uri, newest, local_dir)
        log.info("checkpoint %s downloaded from %s: the trainer resumes from it", newest.name, uri)
    best = complete_in_store(store, uri, BEST, grouped.get(BEST, {}))
    local_best = local_manifest_text(local_dir / BEST)
    # the store's best/ belongs with the store's newest checkpoint; a local best/ with local newer steps stays
    if best is not None and (local_best is None or (downloaded and local_best != best.manifest_text)):
        download(store, uri, best, local_dir)
    return int(newest.name) if downloaded else local_step


def download(store: ObjectStore, uri: str, stored: StoredCheckpoint, local_dir: Path) -> Path:
    """Every listed file into a temp directory, the manifest last, then renamed into place: the trainer (and
    the mirror) only ever see a whole checkpoint."""
    target = local_dir / local_name(stored.name)
    tmp = local_dir / f"{ckpt.TMP_PREFIX}{target.name}-download-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for entry in stored.manifest["files"]:
        relative = Path(*entry["path"].split("/"))
        if relative.is_absolute() or ".." in relative.parts:
            raise ValueError(f"{join(uri, stored.name, MANIFEST)}: file path {entry['path']!r} leaves the checkpoint")
        store.get_file(join(uri, stored.name, entry["path"]), tmp / relative)
    (tmp / MANIFEST).write_text(stored.manifest_text, encoding="utf-8")
    replace_dir(tmp, target)  # fsyncs the tree, then renames over any older copy
    return target


class CheckpointMirror:
    """Copies complete local checkpoints up, manifest last, and mirrors the trainer's pruning.

    `uploaded` maps each local directory name to the manifest text that is complete in the store for it: the
    steps this mirror has seen locally. Only those are ever deleted from the store, and only once the trainer
    has removed them locally, so checkpoints another attempt wrote (and this one never saw) are left alone.
    """

    def __init__(self, store: ObjectStore, uri: str, local_dir: Path):
        self.store, self.uri, self.local_dir = store, uri, local_dir
        self.uploaded: dict[str, str] = {}
        self.lock = threading.Lock()  # the background thread and the final sync never overlap

    def adopt(self) -> None:
        """Local checkpoints the store already holds, byte-identical (just downloaded, or uploaded by an
        earlier attempt in this scratch), count as uploaded."""
        grouped = stored_objects(self.store, self.uri)
        for name, text in self.local_checkpoints().items():
            stored = complete_in_store(self.store, self.uri, remote_name(name), grouped.get(remote_name(name), {}))
            if stored is not None and stored.manifest_text == text:
                self.uploaded[name] = text

    def local_checkpoints(self) -> dict[str, str]:
        """{name: manifest text} of the complete local step-* directories, oldest first, then best/."""
        found = {}
        for path in sorted(ckpt.step_dirs(self.local_dir), key=ckpt.step_of) + [self.local_dir / BEST]:
            try:
                found[path.name] = (path / MANIFEST).read_text(encoding="utf-8")
            except (FileNotFoundError, NotADirectoryError):
                continue  # being pruned or never written
        return found

    def sync(self) -> None:
        with self.lock:
            present = self.local_checkpoints()
            for name, text in present.items():
                if self.uploaded.get(name) != text:
                    self.upload(name, text)
            # only after the new ones are up: the store never holds fewer complete checkpoints than needed
            for name in [n for n in self.uploaded if n != BEST and n not in present]:
                self.store.delete_prefix(join(self.uri, remote_name(name)))
                del self.uploaded[name]
                log.info("checkpoint %s pruned by the trainer: removed from the store", name)

    def upload(self, name: str, manifest_text: str) -> None:
        path, remote = self.local_dir / name, join(self.uri, remote_name(name))
        # an older copy's manifest goes first, so that while its files are replaced the prefix is incomplete
        self.store.delete(join(remote, MANIFEST))
        try:
            for file in sorted(p for p in path.rglob("*") if p.is_file() and p.name != MANIFEST):
                self.store.put_file(join(remote, file.relative_to(path).as_posix()), file)
            unchanged = (path / MANIFEST).read_text(encoding="utf-8") == manifest_text
        except FileNotFoundError:
            unchanged = False
        if not unchanged:
            # pruned or replaced while we copied: a replaced one is copied on the next pass; a pruned step's
            # partial files are garbage
            self.uploaded.pop(name, None)
            if name != BEST and not (path / MANIFEST).exists():
                self.store.delete_prefix(remote)
            return
        self.store.write_text(join(remote, MANIFEST), manifest_text)
        self.uploaded[name] = manifest_text
        log.info("checkpoint %s uploaded to %s", name, remote)
