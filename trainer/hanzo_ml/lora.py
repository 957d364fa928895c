"""The training loop every fine-tuning recipe runs in (full, lora, qlora, adalora, dpo, orpo; see recipes/).

    python -m hanzo_ml train --spec job.json --workdir DIR

Reads the base model and the JSONL named in the spec (chat records, or preference pairs for dpo/orpo), trains
what the spec's method trains (hanzo_ml.recipes: adapters or every weight) with AdamW, a linear warmup/decay
schedule, gradient accumulation and clipping, and writes:
    <checkpoint_dir>/step-<8 digits>/   every checkpoint.every_steps optimizer steps, at the end, and on SIGTERM
    <workdir>/progress.json             after every optimizer step (TrainProgress)
    <output_dir>/adapter/               the final adapter (peft save_pretrained); full: <output_dir>/model/
    <workdir>/result.json               at the end (TrainResult)
A restarted job resumes from the newest checkpoint that verifies and ends bit-identical to an uninterrupted run
on CPU: the checkpoint holds the adapter, optimizer, scheduler, RNG states and the data position, and the data
order is a pure function of (seed, epoch, index).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from hanzo_ml import checkpoint as ckpt
from hanzo_ml import distributed, kernels, memory, recovery
from hanzo_ml.errors import Preempted
from hanzo_ml.files import atomic_write_json, dumps_json
from hanzo_ml.gpu_telemetry import start_gpu_sampler
from hanzo_ml.master_weights import MasterWeights, wants_bf16_weights
from hanzo_ml.metrics import StepMeter, numel
from hanzo_ml.modeling import configure_torch, rng_states, seed_everything, set_rng_states
from hanzo_ml.recipes import Recipe, recipe_for
from hanzo_ml.recipes.components import autocast_forward, batch_tokens, resolve_device, resolve_precision
from hanzo_ml.spec import to_dict
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


def model_type_of(model_dir: str) -> str:
    """config.json's model_type (the kernels plan needs it before the weights load); check_fits read it already."""
    return json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8")).get("model_type", "")


def load_datasets(spec, spec_path: Path, recipe: Recipe):
    """Every input read and validated before any model is loaded: a bad record fails in seconds."""
    datasets = recipe.load_data(spec, spec_path)
    log.info("train: %d %s items, validation: %d", len(datasets.train), recipe.data_form, len(datasets.validation))
    return datasets


def train(spec, spec_path: Path, workdir: Path) -> dict:
    """Run (or resume) the job. SIGTERM is caught from the start, so it never kills a half-written file."""
    with PreemptionSignal() as preemption:
        return run_training(spec, spec_path, workdir, preemption)


def run_training(spec, spec_path: Path, workdir: Path, preemption: PreemptionSignal) -> dict:
    hp = spec.hyperparameters
    checkpoint_dir = Path(spec.checkpoint_dir)
    recipe = recipe_for(spec.method)
    data = load_datasets(spec, spec_path, recipe)
    recipe.check(spec, spec_path)                  # a method this machine cannot run stops here ...
    device = resolve_device(spec)
    micro_batch = memory.check_fits(spec, spec_path, device)  # ... and so does a job that cannot fit its device
    plan = kernels.plan_step(spec, spec_path, device, model_type_of(spec.base_model_path))  # ... or its kernels
    precision = resolve_precision(spec, device)
    bf16_weights = wants_bf16_weights(spec, spec_path, precision)  # ... or its weights' dtype
    world = distributed.init_world(spec.hardware, spec_path, spec.method)  # one process, or a torchrun rank

    # ---- model, optimizer, schedule: built the same way on every start, so saved states load 1:1 -------
    configure_torch(spec.threads)
    seed_everything(hp.seed)
    model = recipe.build_model(spec, spec_path, device)
    kernels.apply_plan(model, plan)
    autocast_forward(model, precision)
    objective = recipe.objective(spec, model, data)

    # ---- resume from the newest checkpoint that verifies: weights now, before fsdp shards them ---------
    if world.is_main:
        ckpt.remove_temp_dirs(checkpoint_dir)
    distributed.barrier(world)  # no rank looks for checkpoints while rank 0 clears half-written ones
    latest, skipped = ckpt.find_resume_checkpoint(checkpoint_dir)
    if latest is not None:
        restore_weights(latest.path, model, spec)
    # weights bf16: the model now reads bf16 copies; the float32 masters are what is trained and saved
    masters = MasterWeights(model) if bf16_weights else None
    wrapped = distributed.wrap_model(model, world, spec.hardware.strategy)  # DDP, model sharded, or model
    sharded = distributed.is_sharded(wrapped)
    trainable = masters.parameters if masters else [p for p in model.parameters() if p.requires_grad]
    # fused: one kernel for the whole update on CUDA; the same state dict, so checkpoints move between devices
    optimizer = torch.optim.AdamW(trainable, lr=hp.learning_rate, weight_decay=hp.weight_decay,
                                  fused=device.type == "cuda")
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_multiplier(step, hp.warmup_steps, hp.max_steps))
    if distributed.uses_deepspeed(spec.hardware):  # the engine takes over the optimizer step (and ZeRO-3 the weights)
        wrapped = distributed.deepspeed_engine(model, optimizer, hp, spec.hardware.strategy, world)
        sharded = distributed.is_sharded(wrapped)
    engine = wrapped if distributed.is_deepspeed(wrapped) else None
    log.info("%s on %s (%s): %d trainable parameters; micro-batches of %d, %d items a step", spec.method, device,
             ("bf16 weights, float32 masters" if masters else "bf16 autocast") if precision else "fp32",
             sum(numel(p) for p in trainable), micro_batch, memory.effective_batch(spec))

    # ---- ... and the optimizer, schedule, RNG and data position once the optimizer exists ------------
    state, resumed_from, last_checkpoint = TrainingState(), None, None
    events = [recovery.event("checkpoint_skipped", ckpt.step_of(checkpoint_dir / name) or 0,
                             f"{name} does not verify ({reason}); resuming from "
                             f"{latest.path.name if latest else 'the start'}") for name, reason in skipped]
    if latest is not None:
        state = restore_training_state(latest.path, model, optimizer, scheduler, spec, engine, masters)
        recovery.override_learning_rate(optimizer, scheduler, hp.learning_rate)
        resumed_from, last_checkpoint = state.step, latest.path.name
        log.info("resumed from %s (step %d, epoch %d, index %d)", latest.path.name, state.step, state.epoch,
                 state.index)
    order = ExampleOrder(len(data.train), hp.seed, state.epoch, state.index)
    first_step = checkpointed_step = state.step
    workdir.mkdir(parents=True, exist_ok=True)
    schedule = ckpt.CheckpointSchedule(spec.checkpoint.every_steps, spec.checkpoint.every_seconds)
    best = ckpt.best_checkpoint(checkpoint_dir)
    best_so_far = {"step": best.step, "eval_loss": best.manifest["eval_loss"]} if best else None
    guard, faults = recovery.DivergenceGuard(spec.recovery.divergence_loss_multiple), recovery.Faults.from_env(workdir)
    meter = StepMeter(model, spec.hardware, world.size)

    def save_checkpoint_now(eval_loss: float | None = None) -> None:
        """eval_loss: this step's validation loss, if it was measured (best/ keeps the lowest)."""
        nonlocal last_checkpoint, checkpointed_step, best_so_far
        checkpointed_step = state.step
        schedule.written()
        # fsdp: every rank sends its shards to rank 0; ddp: every rank already holds the same state; deepspeed:
        # every rank writes its optimizer partition into a staging dir that rank 0 moves into the checkpoint
        staged = checkpoint_dir / f"{ckpt.TMP_PREFIX}{distributed.DEEPSPEED_DIR}-{ckpt.checkpoint_name(state.step)}"
        if engine is not None:
            if world.is_main:
                shutil.rmtree(staged, ignore_errors=True)
            distributed.barrier(world)
            distributed.save_deepspeed_state(engine, staged)
            gathered = (distributed.whole_weights(engine, world), None)
            distributed.barrier(world)  # every partition is on disk before rank 0 takes the directory
        elif sharded:
            gathered = distributed.full_state(model, optimizer, world)
        else:
            gathered = (masters.state_dict() if masters else None, None)
        if not world.is_main:  # rank 0 writes for all
            last_checkpoint = ckpt.checkpoint_name(state.step)
            return
        last_checkpoint = write_checkpoint(checkpoint_dir, model, optimizer, scheduler, state, spec, *gathered,
                                           deepspeed_dir=staged if engine is not None else None)
        if spec.checkpoint.keep_best and eval_loss is not None and (
                best_so_far is None or eval_loss < best_so_far["eval_loss"]):
            ckpt.keep_as_best(checkpoint_dir, checkpoint_dir / last_checkpoint, eval_loss)
            best_so_far = {"step": state.step, "eval_loss": eval_loss}
        tracker.flush(timeout_s=10.0)

    def report_progress() -> None:
        if world.is_main:
            write_progress(workdir, state, hp.max_steps, resumed_from, last_checkpoint,
                       {"best_checkpoint": best_so_far, "events": events, "micro_batch": micro_batch,
                        "totals": meter.totals(state.tokens_seen, state.elapsed_seconds)})

    # ---- the loop ----------------------------------------------------------------------------------
    report_progress()
    tracker = metrics_client(spec.tracking_uri if world.is_main else None, spec.run_id)
    # hanzo.ml.gpu telemetry of this node's GPUs, where it has any (None without: nothing is logged).
    gpu_sampler = start_gpu_sampler(tracker, lambda: state.step) if world.is_main and spec.tracking_uri else None
    try:
        while state.step < hp.max_steps:
            # checked between steps, so the step in flight always completes; every rank stops at the same step
            if distributed.any_rank(preemption.requested, world):
                if checkpointed_step != state.step:
                    save_checkpoint_now()
                    report_progress()
                distributed.final_barrier(world, engine)  # no rank exits (and makes torchrun stop the rest) mid-write
                raise Preempted(f"stopped by SIGTERM after step {state.step}"
                                + (f"; checkpoint {last_checkpoint} holds it" if last_checkpoint else ""))
            started = time.monotonic()

            # One optimizer step = batch_size x gradient_accumulation_steps items, in micro-batches of micro_batch
            # (the recipe's batch_size, or what fits the GPU: the same items either way). Under torchrun each rank
            # collates its rows of every micro-batch (distributed.shard).
            items = [data.train[i] for i in order.take(memory.effective_batch(spec))]
            micro_batches = [data.collate(distributed.shard(items[start:start + micro_batch], world))
                             for start in range(0, len(items), micro_batch)]  # each: (B, T) tensors
            with faults.during_step(model, state.step + 1, micro_batch):  # injected faults, if any
                if world.distributed:
                    loss, grad_norm = distributed.accumulate_and_clip(wrapped, trainable, micro_batches,
                                                                      hp.max_grad_norm, objective, world)
                else:
                    loss, grad_norm = accumulate_and_clip(model, trainable, micro_batches, hp.max_grad_norm,
                                                          objective)
            # NaN/Inf or a loss spike: stop before the update (deepspeed: before the update is checkpointed)
            guard.check(state.step + 1, loss, grad_norm)
            lr = scheduler.get_last_lr()[0]  # the LR this step uses
            if engine is None:  # a DeepSpeed engine stepped already
                optimizer.step()
            if masters:
                masters.copy_to_model()
            recipe.after_optimizer_step(model, state.step)  # AdaLoRA: budget update, before gradients clear
            scheduler.step()
            if engine is None:
                optimizer.zero_grad(set_to_none=True)

            seconds = time.monotonic() - started
            step_tokens = int(distributed.sum_over_ranks(sum(batch_tokens(b) for b in micro_batches), world))
            state.step += 1
            state.epoch, state.index = order.epoch, order.index
            state.tokens_seen += step_tokens
            state.elapsed_seconds += seconds
            step_metrics = {"train/loss": loss, "train/lr": lr, "train/grad_norm": grad_norm,
                            **objective.step_metrics(),  # dpo/orpo: rewards/accuracies, rewards/margins
                            **meter.step_metrics(step_tokens, seconds)}
            if state.step % 10 == 0 or state.step == first_step + 1:
                log.info("step %d/%d loss %.4f lr %.2e grad_norm %.3f %.0f tok/s", state.step, hp.max_steps,
                         loss, lr, grad_norm, step_metrics["train/tokens_per_second"])

            # every N steps, every T seconds (rank 0's clock decides for all), at the end
            due = distributed.from_main(schedule.due(state.step, hp.max_steps), world)
            if due and data.validation and (world.is_main or sharded):  # a sharded forward needs every rank
                step_metrics["eval/loss"] = objective.evaluate(model, data.validation, hp.batch_size)
                log.info("step %d eval/loss %.4f", state.step, step_metrics["eval/loss"])
            state.metrics.update(step_metrics)
            tracker.log_metrics(step_metrics, state.step)
            if due:
                save_checkpoint_now(step_metrics.get("eval/loss"))
            report_progress()

        # ---- the end: final adapter, result --------------------------------------------------------
        if masters:
            masters.release_to_model()
        final_weights = distributed.whole_weights(wrapped, world)
        if not world.is_main:
            distributed.final_barrier(world, engine)
            return {"steps": state.step, "rank": world.rank}
        outputs = recipe.weights.save_final(model, Path(spec.output_dir), Path(spec.base_model_path),
                                            state_dict=final_weights)
        result = {
            "steps": state.step,
            "resumed_from_step": resumed_from,
            "steps_trained_this_process": state.step - first_step,
            **outputs,  # adapter_path (adapter methods) or model_path (full)
            "method": spec.method,
            "final_metrics": state.metrics,
            "tokens_seen": state.tokens_seen,
            "best_checkpoint": best_so_far,
            "events": events,
            "totals": meter.totals(state.tokens_seen, state.elapsed_seconds),
        }
        atomic_write_json(workdir / "result.json", result)
        distributed.final_barrier(world, engine)
        log.info("done: %d steps (%d in this process), output at %s", state.step, state.step - first_step,
                 outputs["adapter_path"] or outputs["model_path"])
        return result
    finally:
        if gpu_sampler is not None:
            gpu_sampler.stop()
        # After SIGTERM the grace period is ticking and the checkpoint is safe: don't wait long on metrics.
        tracker.close(timeout_s=5.0 if preemption.requested else 30.0)
        distributed.shutdown(world, engine)


def accumulate_and_clip(model, trainable, micro_batches, max_grad_norm: float, objective) -> tuple[float, float]:
    """Forward/backward every micro-batch, then clip. Returns (step loss, gradient norm before clipping).

    The objective scales each micro-batch's loss to its share of the step (chat: summed NLL over the step's
    target tokens, so the accumulated gradient is exactly the token mean however padding splits the tokens;
    preference: the mean over the step's pairs), so the gradients add up to the step's loss.
    """
    step_loss = None
    for loss in objective.micro_batch_losses(model, micro_batches):  # each a scalar, its share of the step
        loss.backward()
        # summed on the device in float64, the sum Python's floats would make, so the CPU never waits for a
        # micro-batch's backward before queuing the next forward; one synchronization a step, below
        share = loss.detach().double()
        step_loss = share if step_loss is None else step_loss + share
    grad_norm = torch.nn.utils.clip_grad_norm_(trainable, max_grad_norm).item()
    return step_loss.item(), grad_norm


# ---- checkpoint contents ---------------------------------------------------------------------------

def write_checkpoint(checkpoint_dir: Path, model, optimizer, scheduler, state: TrainingState, spec,
                     weights: dict | None = None, optimizer_state: dict | None = None,
                     deepspeed_dir: Path | None = None) -> str:
    """weights, optimizer_state: an fsdp run's state gathered to this rank (distributed.full_state); otherwise
    the model and optimizer hold it whole. deepspeed_dir: the DeepSpeed optimizer partitions every rank wrote,
    moved into the checkpoint in place of optimizer.pt."""
    recipe = recipe_for(spec.method)

    def contents(directory: Path) -> None:
        recipe.weights.save(model, directory, state_dict=weights)  # adapter/ (peft) or model/ (full)
        recipe.save_extra(model, directory)    # AdaLoRA: its rank allocator
        if deepspeed_dir is not None:
            os.rename(deepspeed_dir, directory / distributed.DEEPSPEED_DIR)
        else:
            torch.save(optimizer_state if optimizer_state is not None else optimizer.state_dict(),
                       directory / "optimizer.pt")
        torch.save(scheduler.state_dict(), directory / "scheduler.pt")
        torch.save(ckpt.rng_states_with_cuda(rng_states()), directory / "rng_state.pt")
        sidecar = {**asdict(state), "run_id": spec.run_id, "hyperparameters": to_dict(spec.hyperparameters),
                   "config": to_dict(spec)}  # the resolved job spec, defaults filled
        (directory / TRAINER_STATE).write_text(dumps_json(sidecar), encoding="utf-8")

    path = ckpt.save_checkpoint(checkpoint_dir, state.step, contents)
    ckpt.prune_checkpoints(checkpoint_dir, spec.checkpoint.keep_last)
    log.info("checkpoint %s written", path.name)
    return path.name


def restore_weights(path: Path, model, spec) -> None:
    """The checkpoint's weights into the whole (not yet sharded or wrapped) model, on every rank."""
    recipe = recipe_for(spec.method)
    recipe.weights.load(model, path)
    recipe.load_extra(model, path)


def restore_training_state(path: Path, model, optimizer, scheduler, spec, engine=None,
                           masters: MasterWeights | None = None) -> TrainingState:
    """The rest of a checkpoint, once the optimizer over the (possibly sharded) parameters, or over the float32
    masters of bf16 weights, exists."""
    sidecar = json.loads((path / TRAINER_STATE).read_text(encoding="utf-8"))
    warn_on_changed_hyperparameters(sidecar.get("hyperparameters", {}), to_dict(spec.hyperparameters), path)
    if engine is not None or (path / distributed.DEEPSPEED_DIR).is_dir():
        saved_hardware = sidecar.get("config", {}).get("hardware", {})
        distributed.load_deepspeed_state(engine, path, saved_hardware, spec.hardware)
    else:
        saved = torch.load(path / "optimizer.pt", weights_only=True)
        if masters is not None:  # an fsdp checkpoint keys its state by name: by index into the masters instead
            saved = masters.optimizer_state_by_index(saved, path)
        distributed.load_optimizer_state(model, optimizer, saved, path)
    scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=True))
    rng = torch.load(path / "rng_state.pt", weights_only=True)
    set_rng_states(rng)
    ckpt.restore_cuda_rng(rng)
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
                   last_checkpoint: str | None, extra: dict | None = None) -> None:
    """extra: best_checkpoint, events, micro_batch, totals (TrainProgress)."""
    atomic_write_json(workdir / "progress.json", {
        "step": state.step,
        "max_steps": max_steps,
        "resumed_from_step": resumed_from,
        "last_checkpoint": last_checkpoint,
        "metrics": state.metrics,
        **(extra or {}),
    })


