"""`python -m hanzo_ml job --envelope URI [--scratch DIR]`: one job, start to end, through the object store.

In order:
  1. read and validate the envelope (exit 2, one line naming the field); a multi-node job without its rendezvous
     variables is refused the same way
  2. devices.json written: the GPUs this node was given (jobio/devices.py); node 0 deletes failure.json and
     result.json of an earlier attempt: a restarted job must not be read as the previous outcome
  3. inputs downloaded, outputs and checkpoints pointed at scratch, spec.json written; the newest complete
     checkpoint of the store downloaded (every node: each rank restores from it)
  4. the child runs; job.log (~5 s), progress.json (on change) and new checkpoints (~2 s) are copied up meanwhile
  5. after it exits (SIGTERM included): the last checkpoints, progress.json, failure.json
  6. on success: every output, job.log, then result.json LAST, its local output paths rewritten to object URIs;
     on bad input (exit 2) from the trainer: the outputs it wrote, its account of what was wrong (prepare-dataset's
     issues file), and no result.json
Only node 0 writes progress, failure, result and checkpoints; node R > 0 writes job-R.log and devices-R.json.

Exit code: the child's (0 done, 2 bad input, 3 out of memory, 4 diverged, 143 preempted, 1 anything else; torchrun
reports 1 whatever its workers did, and failure.json says what happened). The Candle tool prints its report even
when a check fails: with a report the runner exits 0 (the report says ok: false), without one 1.
"""
from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping

from hanzo_ml.errors import InputError
from hanzo_ml.jobio.checkpoints import CheckpointMirror, restore_newest
from hanzo_ml.jobio.child import JobLog, SignalForwarder, run_child
from hanzo_ml.jobio.devices import write_devices
from hanzo_ml.jobio.envelope import Envelope, load_envelope
from hanzo_ml.jobio.launch import Node, candle_command, child_env, node_of, trainer_command
from hanzo_ml.jobio.mirror import FileMirror, Periodic
from hanzo_ml.jobio.scratch import (Scratch, build_spec, command_files, command_work_dir, open_scratch, upload_outputs,
                                    write_result)
from hanzo_ml.jobio.store import ObjectStore, join

log = logging.getLogger(__name__)

LOG_INTERVAL_S = 5.0
PROGRESS_INTERVAL_S = 1.0
CHECKPOINT_INTERVAL_S = 2.0
EXIT_PREEMPTED = 143
EXIT_BAD_INPUT = 2


def run(envelope_uri: str, scratch_dir: Path | None = None, env: Mapping[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    for name in ("botocore", "boto3", "s3transfer", "urllib3"):
        logging.getLogger(name).setLevel(logging.WARNING)  # credential lookups and retries are not the job's log
    store = ObjectStore(env)
    envelope = load_envelope(store, as_uri(envelope_uri))
    node = node_of(envelope, env)
    scratch, created = open_scratch(scratch_dir, env)
    signals = SignalForwarder()
    signals.install()
    try:
        return Job(store, envelope, node, scratch, env).run(signals)
    finally:
        signals.restore()
        if created:  # nobody else knows this directory, so nothing could resume from it
            shutil.rmtree(scratch.root, ignore_errors=True)


def progress_file(envelope: Envelope, scratch: Scratch) -> Path:
    """Where the tool writes progress.json: train in its workdir, prepare-dataset in the work_dir given to it."""
    if command_files(envelope).scratch_field is not None:
        return command_work_dir(envelope, scratch) / "progress.json"
    return scratch.work / "progress.json"


def as_uri(value: str) -> str:
    return value if "://" in value else Path(value).resolve().as_uri()


class Job:
    def __init__(self, store: ObjectStore, envelope: Envelope, node: Node, scratch: Scratch, env: dict[str, str]):
        self.store, self.envelope, self.node, self.scratch, self.env = store, envelope, node, scratch, env
        self.spec: dict[str, Any] = {}
        log_name = "job.log" if node.leader else f"job-{node.rank}.log"
        self.log_mirror = FileMirror(store, scratch.log, join(envelope.job_uri, log_name))
        self.progress_mirror = FileMirror(store, progress_file(envelope, scratch),
                                          join(envelope.job_uri, "progress.json"))
        self.checkpoint_mirror = (CheckpointMirror(store, envelope.checkpoints.uri, scratch.checkpoints)
                                  if envelope.checkpoints and node.leader else None)
        self.job_log: JobLog | None = None

    @property
    def train(self) -> bool:
        return self.envelope.kind == "train"

    @property
    def reports_progress(self) -> bool:
        return self.train or command_files(self.envelope).scratch_field is not None

    def run(self, signals: SignalForwarder) -> int:
        self.continue_log()
        self.job_log = JobLog(self.scratch.log)
        logger = logging.getLogger("hanzo_ml")
        logger.addHandler(self.job_log.handler)
        try:
            log.info("job %s: node %d of %d, %s, scratch %s", self.envelope.job_name, self.node.rank,
                     self.envelope.num_nodes, self.envelope.kind or self.envelope.tool, self.scratch.root)
            return self.run_logged(signals)
        except Exception as e:
            # into job.log only: the command line reports it on stderr once more (one line for bad input)
            text = str(e) + "\n" if isinstance(e, InputError) else traceback.format_exc()
            self.job_log.write(text.encode("utf-8", "replace"), echo=False)
            self.upload_log(best_effort=True)
            raise
        finally:
            logger.removeHandler(self.job_log.handler)
            self.job_log.close()

    def continue_log(self) -> None:
        """A new scratch continues the log an earlier attempt left in the store, so the job's log stays whole."""
        if not self.scratch.log.exists():
            try:
                self.store.get_file(self.log_mirror.uri, self.scratch.log)
            except FileNotFoundError:
                pass

    def run_logged(self, signals: SignalForwarder) -> int:
        write_devices(self.store, self.envelope.job_uri, self.node, self.env)
        if self.node.leader:
            for name in ("failure.json", "result.json"):
                self.store.delete(join(self.envelope.job_uri, name))
        self.spec = build_spec(self.store, self.envelope, self.scratch)
        if self.envelope.checkpoints:
            restore_newest(self.store, self.envelope.checkpoints.uri, self.scratch.checkpoints)
        if self.train:
            self.scratch.work.mkdir(parents=True, exist_ok=True)
            # an earlier attempt's, in a reused scratch: a trainer that stops before it clears them must not
            # have them reported as its own
            for name in ("failure.json", "result.json"):
                (self.scratch.work / name).unlink(missing_ok=True)
        if self.envelope.tool == "trainer":
            command = trainer_command(self.envelope, self.scratch, self.node)
        elif self.envelope.tool == "command":
            command = list(self.envelope.args)
        else:
            command = candle_command(self.envelope, self.spec, self.env)
        if signals.received is not None:
            log.warning("stopped by a signal before the tool started")
            self.upload_log()
            return EXIT_PREEMPTED
        log.info("running %s", shlex.join(command))
        code, stdout = self.supervise(command, signals)
        log.info("%s exited with %d", command[0] if self.envelope.tool != "trainer" else "the trainer", code)
        return self.finish(code, stdout, signals)

    def supervise(self, command: list[str], signals: SignalForwarder) -> tuple[int, bytes]:
        mirrors = [Periodic("job.log", LOG_INTERVAL_S, self.log_mirror.sync)]
        if self.node.leader and self.reports_progress:
            mirrors.append(Periodic("progress.json", PROGRESS_INTERVAL_S, self.progress_mirror.sync))
        if self.checkpoint_mirror is not None:
            self.checkpoint_mirror.adopt()
            mirrors.append(Periodic("checkpoints", CHECKPOINT_INTERVAL_S, self.checkpoint_mirror.sync))
        for mirror in mirrors:
            mirror.start()
        try:
            env = child_env(self.env)
            if self.envelope.tool == "command":
                env.update(self.spec.get("env", {}))
            return run_child(command, env, self.scratch.root, self.job_log, signals,
                             capture_stdout=self.envelope.tool == "candle")
        finally:
            for mirror in mirrors:
                mirror.stop()

    def finish(self, code: int, stdout: bytes, signals: SignalForwarder) -> int:
        if not self.node.leader:
            self.upload_log()
            return code
        if self.checkpoint_mirror is not None:
            retried(self.checkpoint_mirror.sync)  # the last checkpoint: after SIGTERM, the emergency one
        if self.reports_progress:
            retried(self.progress_mirror.sync)
        failure = self.scratch.work / "failure.json"
        if failure.is_file():
            retried(lambda: self.store.put_file(join(self.envelope.job_uri, "failure.json"), failure))
        if self.envelope.tool == "candle":
            code, document = self.candle_outcome(code, stdout, signals)
        elif self.envelope.tool == "command":
            document = {"exit_code": code} if code == 0 else None
        else:
            document = self.trainer_result() if code == 0 else None
            if code == EXIT_BAD_INPUT:
                upload_outputs(self.store, self.envelope, self.scratch, require=False)
        if document is not None:
            log.info("outputs uploaded; writing result.json")
        self.upload_log()
        if document is not None:
            write_result(self.store, self.envelope, self.scratch, document)
        return code

    def trainer_result(self) -> Any:
        field = self.envelope.result_field
        path = Path(self.spec[field]) if field else self.scratch.work / "result.json"
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise RuntimeError(f"the trainer exited 0 but its result {path} is unreadable: {e}") from e
        upload_outputs(self.store, self.envelope, self.scratch, require=True)
        return document

    def candle_outcome(self, code: int, stdout: bytes, signals: SignalForwarder) -> tuple[int, Any]:
        """(exit code, report): a report is the result whatever the checks found; no report is a failure
        (or, after SIGTERM, a preemption)."""
        try:
            report = json.loads(stdout.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            report = None
        if not isinstance(report, dict):
            log.error("the Candle tool exited with %d and printed no JSON report", code)
            return (EXIT_PREEMPTED if signals.received is not None else 1), None
        log.info("Candle report: ok=%s (exit code %d)", report.get("ok"), code)
        upload_outputs(self.store, self.envelope, self.scratch, require=False)
        return 0, report

    def upload_log(self, best_effort: bool = False) -> None:
        try:
            retried(self.log_mirror.sync)
        except Exception as e:  # noqa: BLE001
            if not best_effort:
                raise
            log.warning("could not upload job.log: %s", e)


def retried(action: Callable[[], None], attempts: int = 3, pause_s: float = 2.0) -> None:
    """The final copies: a store that blinks for a moment must not turn a finished job into a failed one."""
    for attempt in range(1, attempts + 1):
        try:
            action()
            return
        except Exception as e:  # noqa: BLE001
            if attempt == attempts:
                raise
            log.warning("copying to the store failed (attempt %d of %d): %s", attempt, attempts, e)
            time.sleep(pause_s)
