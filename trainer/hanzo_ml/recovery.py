"""Faults a training run can recover from, and how the trainer reports them to the control plane.

Out of memory and divergence end the process with their own exit code and a `failure.json` in the workdir
({kind, step, message, at}; a preemption writes one too, since torchrun reports every failure as exit 1);
the control plane (jobs/run-loop.ts) restarts the job with an adjusted spec:
    exit 3  out of memory -> half the micro-batch, twice the gradient accumulation (same effective batch)
    exit 4  diverged      -> resume from the last checkpoint (written before the bad step) with LR x factor
Both resume from the newest checkpoint, so no step that had completed is lost.

Fault injection, for tests and drills (both read from the environment at start-up):
    HANZO_ML_FAULT_NAN_AT_STEP=N            the forward pass of optimizer step N produces NaN embeddings, so
                                            the loss and every gradient of that step are NaN. Fires once per
                                            workdir (a marker file records it), like a transient bad batch, so
                                            a resumed run gets past it.
    HANZO_ML_FAULT_OOM_ABOVE_MICRO_BATCH=K  a micro-batch of more than K examples raises torch.OutOfMemoryError,
                                            as a device with too little memory for it would ...
    HANZO_ML_FAULT_OOM_FROM_STEP=N          ... from optimizer step N on (default 1), as when longer sequences
                                            arrive mid-run.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from hanzo_ml.checkpoint import utc_now
from hanzo_ml.errors import InputError, OutOfMemory, Preempted, TrainingDiverged
from hanzo_ml.files import atomic_write_json

log = logging.getLogger(__name__)

FAILURE_FILE = "failure.json"
FAULT_NAN_AT_STEP = "HANZO_ML_FAULT_NAN_AT_STEP"
FAULT_OOM_ABOVE_MICRO_BATCH = "HANZO_ML_FAULT_OOM_ABOVE_MICRO_BATCH"
FAULT_OOM_FROM_STEP = "HANZO_ML_FAULT_OOM_FROM_STEP"


def event(kind: str, step: int, message: str) -> dict:
    """A TrainEvent (contracts/trainer-job.ts)."""
    return {"kind": kind, "step": step, "message": message, "at": utc_now()}


class DivergenceGuard:
    """Diverged: a NaN or infinite loss or gradient norm, or (when loss_multiple is set) a loss above
    loss_multiple times the lowest loss this process has seen. Checked before optimizer.step(), so the weights
    and the last checkpoint never hold the bad step. (A DeepSpeed engine steps before the check: ZeRO itself
    skips a NaN/Inf update, and a finite spike's update reaches the weights but no checkpoint, so a resume
    still starts from the last good one.)"""

    def __init__(self, loss_multiple: float | None):
        self.loss_multiple = loss_multiple
        self.running_min = math.inf

    def check(self, step: int, loss: float, grad_norm: float) -> None:
        if not (math.isfinite(loss) and math.isfinite(grad_norm)):
            raise TrainingDiverged(f"step {step}: loss {loss}, grad_norm {grad_norm}")
        if self.loss_multiple is not None and loss > self.loss_multiple * self.running_min:
            raise TrainingDiverged(f"step {step}: loss {loss:.4f} is above {self.loss_multiple} x its running "
                                   f"minimum {self.running_min:.4f}")
        self.running_min = min(self.running_min, loss)


@dataclass
class Faults:
    """Injected faults (see the module docstring); none unless the environment asks."""
    workdir: Path
    nan_at_step: int | None = None
    oom_above_micro_batch: int | None = None
    oom_from_step: int = 1

    @classmethod
    def from_env(cls, workdir: Path) -> Faults:
        return cls(workdir, _env_int(FAULT_NAN_AT_STEP, minimum=1), _env_int(FAULT_OOM_ABOVE_MICRO_BATCH, minimum=0),
                   _env_int(FAULT_OOM_FROM_STEP, minimum=1) or 1)

    @contextlib.contextmanager
    def during_step(self, model, step: int, micro_batch_size: int):
        """Wraps the forward/backward passes of optimizer step `step`."""
        if self.oom_above_micro_batch is not None and micro_batch_size > self.oom_above_micro_batch \
                and step >= self.oom_from_step:
            raise torch.OutOfMemoryError(f"injected: a micro-batch of {micro_batch_size} examples does not fit "
                                         f"({FAULT_OOM_ABOVE_MICRO_BATCH}={self.oom_above_micro_batch})")
        marker = self.workdir / f".fault-nan-step-{step}"
        if self.nan_at_step != step or marker.exists():
            yield
            return
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("fired\n", encoding="utf-8")
        log.warning("injecting NaN into the embeddings of step %d (%s)", step, FAULT_NAN_AT_STEP)
        hook = model.get_input_embeddings().register_forward_hook(lambda _m, _i, out: out * float("nan"))
        try:
            yield
        finally:
            hook.remove()


def _env_int(name: str, minimum: int) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise InputError(f"environment {name}: expected an integer >= {minimum}, got {raw!r}")
    return value


@contextlib.contextmanager
def recorded_failure(workdir: Path):
    """Turns out-of-memory, divergence and preemption into failure.json plus the exception the CLI maps to an
    exit code.
    A stale failure.json from an earlier process is removed first, so the file always describes this one."""
    failure = workdir / FAILURE_FILE
    failure.unlink(missing_ok=True)
    try:
        yield
    except torch.OutOfMemoryError as e:
        atomic_write_json(failure, out_of_memory(workdir, _one_line(e)))
        raise OutOfMemory(_one_line(e)) from e
    except OutOfMemory as e:
        atomic_write_json(failure, out_of_memory(workdir, _one_line(e)))
        raise
    except TrainingDiverged as e:
        atomic_write_json(failure, event("diverged", last_step(workdir), _one_line(e)))
        raise
    except Preempted as e:  # under torchrun the launcher's exit code is 1, not 143: the file tells
        atomic_write_json(failure, event("preempted", last_step(workdir), _one_line(e)))
        raise


def out_of_memory(workdir: Path, message: str) -> dict:
    """The failure record, with the micro-batch that ran out: the restart halves that one (the trainer may have
    chosen it larger than the recipe's batch_size, hardware.micro_batch auto)."""
    record = event("out_of_memory", last_step(workdir), message)
    micro_batch = _progress(workdir).get("micro_batch")
    return {**record, "micro_batch": micro_batch} if isinstance(micro_batch, int) else record


def last_step(workdir: Path) -> int:
    try:
        return int(_progress(workdir)["step"])
    except (KeyError, ValueError, TypeError):
        return 0


def _progress(workdir: Path) -> dict:
    try:
        progress = json.loads((workdir / "progress.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return progress if isinstance(progress, dict) else {}


def _one_line(e: BaseException) -> str:
    return str(e).replace("\n", " ")[:500]


def override_learning_rate(optimizer, scheduler, learning_rate: float) -> bool:
    """After loading an optimizer and a LambdaLR scheduler from a checkpoint, make `learning_rate` the peak LR
    (both store the LR they were saved with). Returns whether anything changed; a no-op for the same LR, so an
    unchanged resume stays bit-identical."""
    if all(base == learning_rate for base in scheduler.base_lrs):
        return False
    log.warning("learning rate %s -> %s from this resume on", scheduler.base_lrs[0], learning_rate)
    scheduler.base_lrs = [learning_rate] * len(optimizer.param_groups)
    for group, lr_lambda in zip(optimizer.param_groups, scheduler.lr_lambdas):
        group["initial_lr"] = learning_rate
        group["lr"] = learning_rate * lr_lambda(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]
    return True
