"""LoRA fine-tuning recipe.

    python -m hanzo_ml train --spec job.json --workdir DIR

Reads the base model and the chat JSONL named in the spec, trains LoRA adapters (peft) with AdamW, a linear
warmup/decay schedule, gradient accumulation and clipping, and writes:
    <checkpoint_dir>/step-<8 digits>/   every checkpoint.every_steps optimizer steps, at the end, and on SIGTERM
    <workdir>/progress.json             after every optimizer step (TrainProgress)
    <output_dir>/adapter/               the final adapter (peft save_pretrained)
    <workdir>/result.json               at the end (TrainResult)
A restarted job resumes from the newest checkpoint that verifies and ends bit-identical to an uninterrupted run
on CPU: the checkpoint holds the adapter, optimizer, scheduler, RNG states and the data position, and the data
order is a pure function of (seed, epoch, index).
"""
from __future__ import annotations

import json
import logging
import math
import os
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from hanzo_ml import checkpoint as ckpt
from hanzo_ml.chat import encode_dataset, load_tokenizer, read_chat_jsonl
from hanzo_ml.errors import InputError, Preempted, TrainingDiverged
from hanzo_ml.files import atomic_write_json, dumps_json, replace_dir
from hanzo_ml.modeling import (collate, configure_torch, load_causal_lm, mean_token_nll, rng_states,
                               seed_everything, set_rng_states, summed_token_nll, target_token_count)
from hanzo_ml.spec import require_existing, to_dict
from hanzo_ml.tracking import metrics_client

log = logging.getLogger(__name__)

TRAINER_STATE = "trainer_state.json"


@dataclass
class TrainingState:
    """The scalars a checkpoint carries besides tensors (its JSON sidecar, trainer_state.json)."""
    step: int = 0              # optimizer steps done
    epoch: int = 0             # data position: epoch ...
    index: int = 0             # ... and index into that epoch's permutation
    tokens_seen: int = 0       # non-padding tokens fed to the model
    elapsed_seconds: float = 0.0  # training time summed over every process of this run
    metrics: dict[str, float] = field(default_factory=dict)  # latest value of each metric


class ExampleOrder:
    """Epoch e visits a permutation of the dataset drawn from (seed, e). The position (epoch, index) alone
    determines every batch that follows, so it is all a checkpoint needs to continue the same sequence."""

    def __init__(self, num_examples: int, seed: int, epoch: int = 0, index: int = 0):
        self.num_examples, self.seed, self.epoch, self.index = num_examples, seed, epoch, index
        self._permutation = self._permutation_of(epoch)

    def _permutation_of(self, epoch: int) -> list[int]:
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_examples).tolist()

    def take(self, count: int) -> list[int]:
        """The next `count` example indices; crosses into the next epoch when this one runs out."""
        taken = []
        while len(taken) < count:
            if self.index == self.num_examples:
                self.epoch, self.index = self.epoch + 1, 0
                self._permutation = self._permutation_of(self.epoch)
            taken.append(self._permutation[self.index])
            self.index += 1
        return taken


class PreemptionSignal:
    """SIGTERM sets a flag; the loop finishes its step, writes an emergency checkpoint and exits 143."""

    def __init__(self):
        self.requested = False

    def __enter__(self):
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum, frame):
        if not self.requested:
            log.warning("SIGTERM: finishing the current step, then writing an emergency checkpoint")
        self.requested = True

    def __exit__(self, *exc):
        signal.signal(signal.SIGTERM, self._previous)


def lr_multiplier(step: int, warmup_steps: int, max_steps: int) -> float:
    """Linear warmup to the peak over warmup_steps, then linear decay towards 0 at max_steps.
    Counts from 1 so that no step runs at LR 0 (the first warmup step and the last decay step both learn)."""
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    return (max_steps - step) / max(1, max_steps - warmup_steps)


def build_lora_model(spec, spec_path: Path):
    from peft import LoraConfig, get_peft_model

    hp = spec.hyperparameters
    base = load_causal_lm(Path(spec.base_model_path))
    config = LoraConfig(r=hp.lora_rank, lora_alpha=hp.lora_alpha, lora_dropout=hp.lora_dropout,
                        target_modules=list(hp.target_modules), bias="none", task_type="CAUSAL_LM")
    try:
        model = get_peft_model(base, config)  # freezes the base; A seeded-random, B zero: starts at the base
    except ValueError as e:  # a module name the architecture does not have: only the model can tell
        raise InputError(f"{spec_path}: hyperparameters.target_modules: {e}".replace("\n", " ")) from e
    model.train()
    return model


@dataclass
class Datasets:
    train: list            # TokenizedExample, prompt-masked
    validation: list       # empty when the spec has no validation_path
    pad_id: int


def load_datasets(spec, spec_path: Path) -> Datasets:
    """Every input read and validated before any model is loaded: a bad record fails in seconds."""
    hp = spec.hyperparameters
    require_existing(spec_path, "base_model_path", spec.base_model_path, kind="dir")
    require_existing(spec_path, "train_path", spec.train_path)
    require_existing(spec_path, "validation_path", spec.validation_path)
    tokenizer = load_tokenizer(Path(spec.base_model_path))

    def encode(path: str | None) -> list:
        return encode_dataset(tokenizer, read_chat_jsonl(Path(path)), hp.max_seq_length, path) if path else []

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    datasets = Datasets(train=encode(spec.train_path), validation=encode(spec.validation_path), pad_id=pad_id)
    log.info("train: %d examples, validation: %d examples", len(datasets.train), len(datasets.validation))
    return datasets


def train(spec, spec_path: Path, workdir: Path) -> dict:
    """Run (or resume) the job. SIGTERM is caught from the start, so it never kills a half-written file."""
    with PreemptionSignal() as preemption:
        return run_training(spec, spec_path, workdir, preemption)


def run_training(spec, spec_path: Path, workdir: Path, preemption: PreemptionSignal) -> dict:
    hp = spec.hyperparameters
    checkpoint_dir = Path(spec.checkpoint_dir)
    data = load_datasets(spec, spec_path)

    # ---- model, optimizer, schedule: built the same way on every start, so saved states load 1:1 -------
    configure_torch(spec.threads)
    seed_everything(hp.seed)
    model = build_lora_model(spec, spec_path)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=hp.learning_rate, weight_decay=hp.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_multiplier(step, hp.warmup_steps, hp.max_steps))
    log.info("LoRA r=%d on %s: %d trainable parameters", hp.lora_rank, ",".join(hp.target_modules),
             sum(p.numel() for p in trainable))

    # ---- resume from the newest checkpoint that verifies -------------------------------------------
    ckpt.remove_temp_dirs(checkpoint_dir)
    state, resumed_from, last_checkpoint = TrainingState(), None, None
    latest = ckpt.latest_valid_checkpoint(checkpoint_dir)
    if latest is not None:
        state = restore_checkpoint(latest.path, model, optimizer, scheduler, spec)
        resumed_from, last_checkpoint = state.step, latest.path.name
        log.info("resumed from %s (step %d, epoch %d, index %d)", latest.path.name, state.step, state.epoch,
                 state.index)
    order = ExampleOrder(len(data.train), hp.seed, state.epoch, state.index)
    first_step = checkpointed_step = state.step
    workdir.mkdir(parents=True, exist_ok=True)

    def save_checkpoint_now() -> None:
        nonlocal last_checkpoint, checkpointed_step
        last_checkpoint = write_checkpoint(checkpoint_dir, model, optimizer, scheduler, state, spec)
        checkpointed_step = state.step
        tracker.flush(timeout_s=10.0)

    def report_progress() -> None:
        write_progress(workdir, state, hp.max_steps, resumed_from, last_checkpoint)

    # ---- the loop ----------------------------------------------------------------------------------
    report_progress()
    tracker = metrics_client(spec.tracking_uri, spec.run_id)
    try:
        while state.step < hp.max_steps:
            if preemption.requested:  # checked between steps, so the step in flight always completes
                if checkpointed_step != state.step:
                    save_checkpoint_now()
                    report_progress()
                raise Preempted(f"stopped by SIGTERM after step {state.step}"
                                + (f"; checkpoint {last_checkpoint} holds it" if last_checkpoint else ""))
            started = time.monotonic()

            # One optimizer step = gradient_accumulation_steps micro-batches of batch_size examples each.
            micro_batches = [collate([data.train[i] for i in order.take(hp.batch_size)], data.pad_id)
                             for _ in range(hp.gradient_accumulation_steps)]  # each: (B, T) tensors
            loss, grad_norm = accumulate_and_clip(model, trainable, micro_batches, hp.max_grad_norm)
            if not (math.isfinite(loss) and math.isfinite(grad_norm)):
                raise TrainingDiverged(f"step {state.step + 1}: loss {loss}, grad_norm {grad_norm}; "
                                       "lower the learning rate")
            lr = scheduler.get_last_lr()[0]  # the LR this step uses
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)

            seconds = time.monotonic() - started
            step_tokens = sum(int(b["attention_mask"].sum()) for b in micro_batches)
            state.step += 1
            state.epoch, state.index = order.epoch, order.index
            state.tokens_seen += step_tokens
            state.elapsed_seconds += seconds
            step_metrics = {"train/loss": loss, "train/lr": lr, "train/grad_norm": grad_norm,
                            "train/tokens_per_second": step_tokens / max(seconds, 1e-9)}
            if state.step % 10 == 0 or state.step == first_step + 1:
                log.info("step %d/%d loss %.4f lr %.2e grad_norm %.3f %.0f tok/s", state.step, hp.max_steps,
                         loss, lr, grad_norm, step_metrics["train/tokens_per_second"])

            due = state.step % spec.checkpoint.every_steps == 0 or state.step == hp.max_steps
            if due and data.validation:
                step_metrics["eval/loss"], _ = mean_token_nll(model, data.validation, data.pad_id,
                                                              hp.batch_size)
                log.info("step %d eval/loss %.4f", state.step, step_metrics["eval/loss"])
            state.metrics.update(step_metrics)
            tracker.log_metrics(step_metrics, state.step)
            if due:
                save_checkpoint_now()
            report_progress()

        # ---- the end: final adapter, result --------------------------------------------------------
        adapter_dir = save_final_adapter(model, Path(spec.output_dir))
        result = {
            "steps": state.step,
            "resumed_from_step": resumed_from,
            "steps_trained_this_process": state.step - first_step,
            "adapter_path": str(adapter_dir),
            "final_metrics": state.metrics,
            "tokens_seen": state.tokens_seen,
        }
        atomic_write_json(workdir / "result.json", result)
        log.info("done: %d steps (%d in this process), adapter at %s", state.step, state.step - first_step,
                 adapter_dir)
        return result
    finally:
        # After SIGTERM the grace period is ticking and the checkpoint is safe: don't wait long on metrics.
        tracker.close(timeout_s=5.0 if preemption.requested else 30.0)


def accumulate_and_clip(model, trainable, micro_batches, max_grad_norm: float) -> tuple[float, float]:
    """Forward/backward every micro-batch, then clip. Returns (step loss, gradient norm before clipping).

    Each micro-batch's summed NLL is divided by the target tokens of the whole step, so the accumulated
    gradient is exactly that of the token-mean loss over the step, however padding splits the tokens.
    """
    num_targets = max(1, sum(target_token_count(b) for b in micro_batches))
    step_loss = 0.0
    for batch in micro_batches:
        loss = summed_token_nll(model, batch) / num_targets  # scalar
        loss.backward()
        step_loss += loss.item()
    grad_norm = torch.nn.utils.clip_grad_norm_(trainable, max_grad_norm).item()
    return step_loss, grad_norm


# ---- checkpoint contents ---------------------------------------------------------------------------

def write_checkpoint(checkpoint_dir: Path, model, optimizer, scheduler, state: TrainingState, spec) -> str:
    def contents(directory: Path) -> None:
        model.save_pretrained(directory / "adapter")  # adapter_model.safetensors + adapter_config.json
        torch.save(optimizer.state_dict(), directory / "optimizer.pt")
        torch.save(scheduler.state_dict(), directory / "scheduler.pt")
        torch.save(rng_states(), directory / "rng_state.pt")
        sidecar = {**asdict(state), "run_id": spec.run_id, "hyperparameters": to_dict(spec.hyperparameters)}
        (directory / TRAINER_STATE).write_text(dumps_json(sidecar), encoding="utf-8")

    path = ckpt.save_checkpoint(checkpoint_dir, state.step, contents)
    ckpt.prune_checkpoints(checkpoint_dir, spec.checkpoint.keep_last)
    log.info("checkpoint %s written", path.name)
    return path.name


def restore_checkpoint(path: Path, model, optimizer, scheduler, spec) -> TrainingState:
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    sidecar = json.loads((path / TRAINER_STATE).read_text(encoding="utf-8"))
    warn_on_changed_hyperparameters(sidecar.get("hyperparameters", {}), to_dict(spec.hyperparameters), path)
    loaded = set_peft_model_state_dict(model, load_file(path / "adapter" / "adapter_model.safetensors"))
    if getattr(loaded, "unexpected_keys", None):
        raise RuntimeError(f"{path}: adapter weights do not fit this LoRA configuration: "
                           f"{loaded.unexpected_keys[:3]}")
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
    scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=True))
    set_rng_states(torch.load(path / "rng_state.pt", weights_only=True))
    fields = TrainingState.__dataclass_fields__
    return TrainingState(**{k: v for k, v in sidecar.items() if k in fields})


def warn_on_changed_hyperparameters(saved: dict, current: dict, path: Path) -> None:
    """A resumed run with other hyperparameters is a different run (population-based training does this on
    purpose); say so, since it is no longer bit-identical to either."""
    changed = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
    if changed:
        log.warning("resuming %s with changed hyperparameters: %s", path.name,
                    ", ".join(f"{k} {saved.get(k)!r} -> {current.get(k)!r}" for k in changed))


# ---- files handed back ---------------------------------------------------------------------------

def write_progress(workdir: Path, state: TrainingState, max_steps: int, resumed_from: int | None,
                   last_checkpoint: str | None) -> None:
    atomic_write_json(workdir / "progress.json", {
        "step": state.step,
        "max_steps": max_steps,
        "resumed_from_step": resumed_from,
        "last_checkpoint": last_checkpoint,
        "metrics": state.metrics,
    })


def save_final_adapter(model, output_dir: Path) -> Path:
    output_dir.mkdir(parents=True, exist_ok=True)
    final = output_dir / "adapter"
    tmp = output_dir / f".tmp-adapter-{os.getpid()}"
    model.save_pretrained(tmp)
    replace_dir(tmp, final)
    return final
