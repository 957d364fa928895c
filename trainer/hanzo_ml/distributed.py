"""Data-parallel training across the processes torchrun starts (hardware.processes > 1).

    torchrun --nproc-per-node N -m hanzo_ml train --spec job.json --workdir DIR

Every rank builds the same model from the same seed, walks the same example order and, of each micro-batch of
batch_size examples, takes the rows rank, rank + N, ...: N processes together compute exactly the micro-batch a
single process would (batch_size must be at least N). Gradients are averaged by DDP, so each rank's loss is its
summed token NLL over the step's *global* target count, times N: the averaged gradient is then the gradient of
the single-process token-mean loss. Rank 0 alone writes checkpoints, progress, metrics and the final adapter;
every rank resumes from the same checkpoint. Decisions that must not differ between ranks (a time-based
checkpoint, a SIGTERM seen by one rank first) are taken by rank 0 / by all-reduce.

Strategies: ddp (DistributedDataParallel; gloo on CPU, nccl on CUDA). fsdp is refused with an InputError: its
sharded weights and optimizer state need collective gathering to write a checkpoint (and scattering to resume),
which this trainer does not do, and a checkpoint it cannot resume from exactly is worse than none. deepspeed_zero2/3
need the deepspeed package (configs in recipes/deepspeed/) and are refused when it is not installed.
"""
from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from hanzo_ml.errors import InputError
from hanzo_ml.modeling import target_token_count

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class World:
    rank: int = 0
    local_rank: int = 0
    size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def check_strategy(hardware, spec_path) -> None:
    """Refuse, before any model is loaded, a strategy this machine cannot run."""
    if hardware.strategy.startswith("deepspeed") and importlib.util.find_spec("deepspeed") is None:
        raise InputError(f"{spec_path}: hardware.strategy: {hardware.strategy} needs the deepspeed package, which is "
                         "not installed in the trainer environment (use ddp or fsdp, or install deepspeed)")
    if hardware.strategy.startswith("deepspeed"):
        raise InputError(f"{spec_path}: hardware.strategy: {hardware.strategy} is configured by "
                         "recipes/deepspeed/ for the deepspeed launcher; this trainer runs ddp")
    if hardware.strategy == "fsdp" and hardware.processes > 1:
        raise InputError(f"{spec_path}: hardware.strategy: fsdp checkpoints are not written by this trainer "
                         "(sharded state is not gathered); use ddp, which replicates the model on every process")


def init_world(hardware, spec_path) -> World:
    """The process group torchrun set up (RANK, WORLD_SIZE, MASTER_ADDR in the environment), or one process."""
    check_strategy(hardware, spec_path)
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size != hardware.processes:
        raise InputError(f"{spec_path}: hardware.processes: {hardware.processes}, but this process was started "
                         f"as one of {size} (launch with torchrun --nproc-per-node {hardware.processes})")
    if size == 1:
        return World()
    world = World(rank=int(os.environ["RANK"]), local_rank=int(os.environ.get("LOCAL_RANK", "0")), size=size)
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(world.local_rank)
        dist.init_process_group(backend)
    log.info("rank %d of %d (%s)", world.rank, world.size, dist.get_backend())
    return world


def wrap_model(model, world: World, strategy: str):
    """The module the forward/backward passes go through; `model` itself stays the one saved."""
    if not world.distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel

    devices = [world.local_rank] if torch.cuda.is_available() else None
    return DistributedDataParallel(model, device_ids=devices)


def shard(examples: list, world: World) -> list:
    """This rank's rows of a micro-batch."""
    if len(examples) < world.size:
        raise InputError(f"hyperparameters.batch_size: {len(examples)} is less than hardware.processes "
                         f"{world.size}; every process needs at least one example per micro-batch")
    return examples[world.rank::world.size]


def sum_over_ranks(value: float, world: World) -> float:
    if not world.distributed:
        return value
    tensor = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(tensor)
    return float(tensor.item())


def any_rank(flag: bool, world: World) -> bool:
    return sum_over_ranks(1.0 if flag else 0.0, world) > 0 if world.distributed else flag


def from_main(value, world: World):
    """Rank 0's value on every rank (for decisions that depend on a clock)."""
    if not world.distributed:
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def barrier(world: World) -> None:
    if world.distributed:
        dist.barrier()


def accumulate_and_clip(wrapped, trainable, micro_batches, max_grad_norm: float, objective,
                        world: World) -> tuple[float, float]:
    """The distributed counterpart of the recipe's accumulate_and_clip: the loss and gradient one process would
    compute on the whole micro-batches. Returns (step loss over all ranks, gradient norm before clipping).

    The objective scales each micro-batch loss by this rank's share of the step (its target tokens, or its
    micro-batch count). For the token-mean chat objective each rank's loss is rescaled to the *global* target
    count; mean objectives (preference pairs, AdaLoRA) average equally sized shards, which needs batch_size to
    be a multiple of the process count. DDP then averages gradients over ranks, hence the factor world.size.
    """
    from hanzo_ml.recipes.components import ChatObjective

    if type(objective) is ChatObjective:
        local_targets = float(max(1, sum(target_token_count(b) for b in micro_batches)))
        share = local_targets / max(1.0, sum_over_ranks(float(sum(target_token_count(b) for b in micro_batches)),
                                                        world))
    else:
        rows = [len(next(v for v in b.values() if torch.is_tensor(v))) for b in micro_batches]
        if any(sum_over_ranks(float(n), world) != n * world.size for n in rows):
            raise InputError(f"hyperparameters.batch_size must be a multiple of hardware.processes ({world.size}) "
                             f"for method objectives that average per micro-batch")
        share = 1.0 / world.size
    step_loss = 0.0
    losses = objective.micro_batch_losses(wrapped, micro_batches)
    for i, loss in enumerate(_synced_last(wrapped, losses, len(micro_batches))):
        step_loss += loss.item() * share
        (loss * share * world.size).backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(trainable, max_grad_norm).item()
    return sum_over_ranks(step_loss, world), grad_norm


def _synced_last(wrapped, losses, count: int):
    """Yields the losses with DDP's gradient sync off for all but the last micro-batch (one all-reduce a step).
    The forward must run inside no_sync too, so each loss is produced inside the context."""
    iterator = iter(losses)
    for i in range(count):
        last = i == count - 1
        with (contextlib.nullcontext() if last or not hasattr(wrapped, "no_sync") else wrapped.no_sync()):
            loss = next(iterator)
            yield loss
    for _ in iterator:  # let the objective finish (it may collect metrics after its last loss)
        pass


def shutdown(world: World) -> None:
    if world.distributed and dist.is_initialized():
        dist.destroy_process_group()
