"""Background copies into the store while the child runs: job.log, progress.json, checkpoints.

Each runs on its own daemon thread at its own pace, so a long checkpoint upload never holds back the log. A
failed copy is logged and tried again on the next tick: a store that is unreachable for a minute must not end a
training run that is otherwise fine. The final copy after the child exits is made by the runner itself, on the
main thread, once the threads have stopped.
"""
from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path
from typing import Callable

from hanzo_ml.jobio.store import ObjectStore

log = logging.getLogger(__name__)


class Periodic:
    """Calls `action` every `interval_s` seconds until stopped."""

    def __init__(self, name: str, interval_s: float, action: Callable[[], None]):
        self.name, self.interval_s, self.action = name, interval_s, action
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=f"mirror-{name}", daemon=True)

    def start(self) -> Periodic:
        self.thread.start()
        return self

    def _loop(self) -> None:
        while not self.stopped.wait(self.interval_s):
            try:
                self.action()
            except Exception as e:  # noqa: BLE001 - logged; the next tick retries
                log.warning("copying %s to the store failed (retrying): %s: %s", self.name, type(e).__name__, e)

    def stop(self) -> None:
        """Waits for a copy in flight to finish, so the final copy that follows does not race it."""
        self.stopped.set()
        self.thread.join()


class FileMirror:
    """One local file copied to one object whenever it changed (new inode, size or mtime: the trainer replaces
    progress.json by rename; job.log grows)."""

    def __init__(self, store: ObjectStore, local: Path, uri: str):
        self.store, self.local, self.uri = store, local, uri
        self.copied: tuple[int, int, int] | None = None

    def sync(self) -> None:
        try:
            status = self.local.stat()
        except FileNotFoundError:
            return
        signature = (status.st_ino, status.st_size, status.st_mtime_ns)
        if signature == self.copied:
            return
        # a snapshot, so that the bytes uploaded and the sha256 sent with them agree while job.log grows
        snapshot = self.local.with_name(f".{self.local.name}.upload")
        try:
            shutil.copyfile(self.local, snapshot)
            self.store.put_file(self.uri, snapshot)
        finally:
            snapshot.unlink(missing_ok=True)
        self.copied = signature
