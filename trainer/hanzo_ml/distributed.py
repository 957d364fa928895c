"""Data-parallel training across the processes torchrun starts (hardware.processes > 1).

    torchrun --nproc-per-node N -m hanzo_ml train --spec job.json --workdir DIR

Every rank builds the same model from the same seed, walks the same example order and, of each micro-batch of
batch_size examples, takes the rows rank, rank + N, ...: N processes together compute exactly the micro-batch a
single process would (batch_size must be at least N). Gradients are averaged by DDP, so each rank's loss is its
summed token NLL over the step's *global* target count, times N: the averaged gradient is then the gradient of
the single-process token-mean loss. Rank 0 alone writes checkpoints, progress, metrics and the final adapter;
every rank resumes from the same checkpoint. Decisions that must not differ between ranks (a time-based
checkpoint, a SIGTERM seen by one rank first) are taken by rank 0 / by all-reduce.

Strategies:
- ddp: DistributedDataParallel (gloo on CPU, nccl on CUDA); every rank holds the whole model and optimizer.
- fsdp: FSDP2 (torch.distributed.fsdp.fully_shard) on every decoder layer and the root, for the chat methods
  full and lora: weights, gradients and optimizer state are split over the ranks. A checkpoint gathers the
  trainable weights and the optimizer state to rank 0 as one process would hold them, so it is the same files as
  a single-process checkpoint (weights keyed by name, optimizer state keyed by parameter name), loads into one
  process for evaluation, and resumes under fsdp by loading the weights before sharding and scattering the
  optimizer state after. Every rank takes part in a checkpoint, an evaluation and the final save, since each
  forward pass and each gather is collective.
- deepspeed_zero2 / deepspeed_zero3: a DeepSpeed engine (ZeRO stage 2: optimizer state and gradients split over
  the ranks; stage 3: the weights too) over the same AdamW and schedule, configured by recipes/deepspeed/zero2.json
  or zero3.json with their "auto" values filled from the job's hyperparameters, for the chat methods full and
  lora. In DeepSpeed's unmanaged accumulation mode the loop keeps its micro-batches and loss scaling: each
  micro-batch's backward reduces its gradients into the ranks' partitions, and one step() at the end of the
  step clips and updates. On a
  machine without CUDA it runs on DeepSpeed's CPU accelerator over gloo. A checkpoint holds the whole trainable
  weights as one process writes them (stage 3 gathers them to rank 0) and, instead of optimizer.pt, DeepSpeed's
  own checkpoint of each rank's optimizer partition in deepspeed/; it resumes under the same strategy and
  process count only, which is checked.
"""
from __future__ import annotations

import contextlib
import importlib.util
import logging
import json
import os
from dataclasses import dataclass
from pathlib import Path

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


SHARDED_METHODS = ("full", "lora")  # the methods fsdp and deepspeed run
SHARDING_REFUSALS = {
    "qlora": "its base is bitsandbytes 4-bit tensors, which the sharding cannot split",
    "adalora": "its rank allocator reads and masks whole adapter matrices after every step",
    "dpo": "its loss runs through trl, which this trainer has not verified on sharded weights",
    "orpo": "its loss runs through trl, which this trainer has not verified on sharded weights",
}
DEEPSPEED_STAGES = {"deepspeed_zero2": 2, "deepspeed_zero3": 3}
DEEPSPEED_CONFIGS = Path(__file__).resolve().parents[2] / "recipes" / "deepspeed"


def uses_deepspeed(hardware) -> bool:
    return hardware.strategy in DEEPSPEED_STAGES and hardware.processes > 1


def check_strategy(hardware, spec_path, method: str) -> None:
    """Refuse, before any model is loaded, a strategy this machine or this method cannot run."""
    if hardware.strategy in DEEPSPEED_STAGES and importlib.util.find_spec("deepspeed") is None:
        raise InputError(f"{spec_path}: hardware.strategy: {hardware.strategy} needs the deepspeed package, which is "
                         "not installed in the trainer environment (scripts/bootstrap.sh installs it from "
                         "trainer/requirements-deepspeed.lock; or use ddp or fsdp)")
    if hardware.strategy != "ddp" and hardware.processes > 1 and method not in SHARDED_METHODS:
        raise InputError(f"{spec_path}: hardware.strategy: {hardware.strategy} runs methods "
                         f"{', '.join(SHARDED_METHODS)}; method {method} cannot be sharded "
                         f"({SHARDING_REFUSALS[method]}): use ddp")


def init_world(hardware, spec_path, method: str) -> World:
    """The process group torchrun set up (RANK, WORLD_SIZE, MASTER_ADDR in the environment), or one process."""
    check_strategy(hardware, spec_path, method)
    size = int(os.environ.get("WORLD_SIZE", "1"))
    nodes = getattr(hardware, "nodes", 1) or 1  # a multi-node job: processes per node times its nodes
    if size != hardware.processes * nodes:
        raise InputError(f"{spec_path}: hardware.processes: {hardware.processes} on {nodes} node(s), but this process "
                         f"was started as one of {size} (launch with torchrun --nnodes {nodes} "
                         f"--nproc-per-node {hardware.processes})")
    if size == 1:
        return World()
    world = World(rank=int(os.environ["RANK"]), local_rank=int(os.environ.get("LOCAL_RANK", "0")), size=size)
    if hardware.strategy in DEEPSPEED_STAGES:
        # DeepSpeed picks its accelerator when first imported; without CUDA, its CPU one (collectives over gloo).
        os.environ.setdefault("DS_ACCELERATOR", "cuda" if torch.cuda.is_available() else "cpu")
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(world.local_rank)
        dist.init_process_group(backend)
    log.info("rank %d of %d (%s)", world.rank, world.size, dist.get_backend())
    return world


def wrap_model(model, world: World, strategy: str):
    """The module the forward/backward passes go through: DDP around `model`, or `model` itself sharded in place
    (fsdp), or `model` alone (one process; deepspeed, whose engine is built once the optimizer exists)."""
    if not world.distributed or strategy in DEEPSPEED_STAGES:
        return model
    if strategy == "fsdp":
        return shard_model(model)
    from torch.nn.parallel import DistributedDataParallel

    devices = [world.local_rank] if torch.cuda.is_available() else None
    return DistributedDataParallel(model, device_ids=devices)


def shard_model(model):
    """FSDP2: one communication group per decoder layer (the classes transformers marks as never to be split),
    then the root for what is left (embeddings, final norm, head). Frozen and trainable parameters may share a
    group, so LoRA needs no special wrapping policy."""
    from torch.distributed.fsdp import fully_shard

    transformer = model.get_base_model() if hasattr(model, "get_base_model") else model
    layer_classes = set(getattr(transformer, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in layer_classes]
    if not layers:
        raise InputError(f"hardware.strategy: fsdp: {type(transformer).__name__} names no decoder layer class "
                         "(_no_split_modules) to shard by; use ddp")
    for layer in layers:
        fully_shard(layer)
    fully_shard(model)
    return model


def is_sharded(model) -> bool:
    """Whether the weights are split over the ranks (fsdp, ZeRO stage 3): every forward pass is collective."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule) or getattr(model, "zero_optimization_stage", lambda: 0)() == 3


def deepspeed_engine(model, optimizer, hp, strategy: str, world: World):
    """A DeepSpeed engine over `model` and `optimizer` (our AdamW, whose param groups the LR schedule keeps
    driving), configured by recipes/deepspeed/<stage>.json with its "auto" values filled from the job."""
    import deepspeed

    config = deepspeed_config(strategy, hp, world, hidden_size=getattr(model.config, "hidden_size", 0))
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config, dist_init_required=False)
    return engine


def deepspeed_config(strategy: str, hp, world: World, hidden_size: int) -> dict:
    path = DEEPSPEED_CONFIGS / f"zero{DEEPSPEED_STAGES[strategy]}.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    micro = max(1, hp.batch_size // world.size)  # DeepSpeed only checks and reports it: shard() splits the rows
    auto = {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": hp.gradient_accumulation_steps,
        "gradient_clipping": hp.max_grad_norm,
        # The model trains in fp32 master weights under our bf16 autocast, as with ddp and fsdp.
        "bf16.enabled": False,
        "fp16.enabled": False,
        # transformers' defaults for the sizes that follow the model (HfDeepSpeedConfig)
        "zero_optimization.reduce_bucket_size": hidden_size * hidden_size,
        "zero_optimization.stage3_prefetch_bucket_size": int(0.9 * hidden_size * hidden_size),
        "zero_optimization.stage3_param_persistence_threshold": 10 * hidden_size,
    }
    for dotted, value in auto.items():
        *parents, key = dotted.split(".")
        section = config
        for name in parents:
            section = section.get(name, {})
        if section.get(key) == "auto":
            section[key] = value
    left = [k for k, v in _flatten(config) if v == "auto"]
    if left:
        raise InputError(f"{path}: no value for \"auto\" at {', '.join(left)}")
    return {**config, "train_batch_size": micro * hp.gradient_accumulation_steps * world.size,
            # the loop hands the engine whole steps: backward of every micro-batch, then one step()
            "managed_gradient_accumulation": False,
            "zero_allow_untested_optimizer": True,  # torch's AdamW, not DeepSpeed's own
            "steps_per_print": 2**31 - 1}


def _flatten(config: dict, prefix: str = ""):
    for key, value in config.items():
        if isinstance(value, dict):
            yield from _flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def full_state(model, optimizer, world: World) -> tuple[dict | None, dict | None]:
    """The trainable weights and the optimizer state of a sharded model gathered to rank 0 on the CPU, as one
    process would hold them (weights by name; optimizer state by parameter name). Collective: every rank calls
    it; ranks other than 0 get (None, None). The frozen base of an adapter method is never gathered."""
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         get_optimizer_state_dict)

    options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
    weights = get_model_state_dict(model, options=options)
    optimizer_state = get_optimizer_state_dict(model, optimizer, options=options) if optimizer is not None else None
    return (weights, optimizer_state) if world.is_main else (None, None)


def load_optimizer_state(model, optimizer, saved: dict, source) -> None:
    """A checkpoint's optimizer state into `optimizer`: a single-process or ddp checkpoint keys it by parameter
    index, an fsdp one by parameter name (each rank keeps its shard of the full state)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    groups = saved.get("param_groups") or [{}]
    by_name = any(isinstance(p, str) for p in groups[0].get("params", []))
    if by_name:
        set_optimizer_state_dict(model, optimizer, saved, options=StateDictOptions(full_state_dict=True))
    elif is_sharded(model):
        raise InputError(f"{source}: optimizer.pt was written by a single-process or ddp run (state by parameter "
                         "index); resume it with strategy ddp, or start the fsdp run afresh")
    else:
        optimizer.load_state_dict(saved)


def is_deepspeed(wrapped) -> bool:
    return hasattr(wrapped, "zero_optimization_stage")


def whole_weights(wrapped, world: World) -> dict | None:
    """The weights to save when the model's own tensors cannot be saved as they are, on rank 0 (None on the
    others, and None where the model's own can be saved). Where they are split over the ranks (fsdp, ZeRO-3) the
    trainable ones are gathered, which is collective: every rank calls it. ZeRO-2 keeps whole weights on every
    rank, but as views into its flat buffers, which safetensors refuses to save: those are copied out."""
    if is_sharded(wrapped):
        if not is_deepspeed(wrapped):
            return full_state(wrapped, None, world)[0]
        # one layer at a time to rank 0 (what transformers' and accelerate's ZeRO-3 saving call too)
        weights = wrapped._zero3_consolidated_16bit_state_dict(exclude_frozen_parameters=True)
        return weights if world.is_main else None
    if is_deepspeed(wrapped) and world.is_main:
        return {name: _own_storage(t) for name, t in wrapped.module.state_dict().items()}
    return None


def _own_storage(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor, or, when it is a view into a larger buffer, a copy of it on the CPU (never a second copy of
    the weights on the GPU)."""
    whole = tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
    return tensor if whole else tensor.detach().to("cpu", copy=True)


DEEPSPEED_DIR, DEEPSPEED_TAG = "deepspeed", "state"


def save_deepspeed_state(engine, directory: Path) -> None:
    """Every rank writes its optimizer partition (and ZeRO-3 its weight partition) under directory: DeepSpeed's
    own checkpoint, which only a run with the same stage and process count can load. Collective."""
    engine.save_checkpoint(str(directory), tag=DEEPSPEED_TAG, save_latest=False, exclude_frozen_parameters=True)


def load_deepspeed_state(engine, checkpoint: Path, saved_hardware: dict, hardware) -> None:
    """A checkpoint's DeepSpeed optimizer partitions into `engine`, after checking the run that wrote them
    split its state the same way (the files are per rank and per stage)."""
    saved = f"{saved_hardware.get('strategy')} over {saved_hardware.get('processes')} processes"
    wanted = f"{hardware.strategy} over {hardware.processes} processes"
    if not (checkpoint / DEEPSPEED_DIR).is_dir():
        raise InputError(f"{checkpoint}: written by a {saved} run, whose optimizer state (optimizer.pt) a "
                         f"deepspeed run over several processes cannot split; resume it as it was written "
                         f"(hardware.strategy {saved_hardware.get('strategy')}, processes "
                         f"{saved_hardware.get('processes')}), or start the {wanted} run afresh")
    if engine is None or saved != wanted:
        raise InputError(f"{checkpoint}: holds the DeepSpeed optimizer partitions of a {saved} run; it resumes "
                         f"only as one (this job asks for {wanted})")
    loaded, _ = engine.load_checkpoint(str(checkpoint / DEEPSPEED_DIR), tag=DEEPSPEED_TAG, load_module_strict=False,
                                       load_optimizer_states=True, load_lr_scheduler_states=False)
    if loaded is None:
        raise InputError(f"{checkpoint / DEEPSPEED_DIR}: DeepSpeed found no checkpoint tagged {DEEPSPEED_TAG!r}")


def scalar(value) -> float:
    """A float from a tensor that may be a DTensor (a norm over sharded gradients: its full value), or a number."""
    if not torch.is_tensor(value):  # DeepSpeed reports an overflowed norm as a plain float
        return float(value)
    return float((value.full_tensor() if hasattr(value, "full_tensor") else value).item())


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
    A DeepSpeed engine also takes the optimizer step here (its step() clips and updates), so under deepspeed
    the caller does not step the optimizer.

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
    if is_deepspeed(wrapped):
        for loss in losses:  # each backward averages its gradients over the ranks into their partitions
            step_loss += loss.item() * share
            wrapped.backward(loss * share * world.size, scale_wrt_gas=False)
        wrapped.step()  # clips to gradient_clipping and updates
        return sum_over_ranks(step_loss, world), scalar(wrapped.get_global_grad_norm())
    for i, loss in enumerate(_synced_last(wrapped, losses, len(micro_batches))):
        step_loss += loss.item() * share
        (loss * share * world.size).backward()
    grad_norm = scalar(torch.nn.utils.clip_grad_norm_(trainable, max_grad_norm))
    return sum_over_ranks(step_loss, world), grad_norm


def _synced_last(wrapped, losses, count: int):
    """Yields the losses with gradient sync off for all but the last micro-batch (one all-reduce, or one
    reduce-scatter under fsdp, a step). The forward must run inside the context too, so each loss is produced
    inside it."""
    iterator = iter(losses)
    for i in range(count):
        with (contextlib.nullcontext() if i == count - 1 else _no_gradient_sync(wrapped)):
            loss = next(iterator)
            yield loss
    for _ in iterator:  # let the objective finish (it may collect metrics after its last loss)
        pass


@contextlib.contextmanager
def _no_gradient_sync(wrapped):
    if hasattr(wrapped, "no_sync"):  # DDP
        with wrapped.no_sync():
            yield
    elif hasattr(wrapped, "set_requires_gradient_sync"):  # FSDP2: gradients stay unsharded, summed locally
        wrapped.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            wrapped.set_requires_gradient_sync(True)
    else:
        yield


# The last barrier of each process group, referenced until the process exits (see final_barrier).
_FINAL_BARRIERS: list = []


def final_barrier(world: World, engine=None) -> None:
    """The last collective of a run, which every rank reaches together (the run is done, or every rank stops at
    the same step): a barrier on each process group the run used, whose gloo handles stay referenced until the
    process exits.

    Gloo runs each collective on a worker thread, and that thread drops its own reference to the work only after
    the caller has been told it finished. A barrier also keeps (weakly) the works still in flight when it was
    issued, so those are freed with it: after a ZeRO-3 gather, that is the gather's buffers, tensors made in
    Python, whose freeing takes the GIL. destroy_process_group joins the worker threads only when the group
    itself is freed, which never happens under ZeRO-3 (DeepSpeed's parameters and module stack keep the groups
    for the life of the process). So a worker thread could still be freeing them while the interpreter
    finalizes, and a thread that takes the GIL then is ended mid-destructor: the C++ runtime aborts the process
    ("terminate called without an active exception", SIGABRT) after a successful run. Held here, the barrier is
    never the worker thread's to free, nor is anything it keeps: they are freed on the main thread at exit."""
    if not world.distributed:
        return
    groups = [None]  # the default group, last: the run's last collective
    engine_group = getattr(engine, "data_parallel_group", None)  # DeepSpeed's own copy of the world group
    if engine_group is not None and engine_group is not dist.group.WORLD:
        groups.insert(0, engine_group)
    for group in groups:
        if dist.get_backend(group) != "gloo":  # nccl: destroy_process_group shuts its threads down
            dist.barrier(group)
            continue
        work = dist.barrier(group, async_op=True)
        work.wait()
        _FINAL_BARRIERS.append(work)


def shutdown(world: World, engine=None) -> None:
    """DeepSpeed's teardown of its engine (the ZeRO-3 module and gradient hooks come off the model), then the
    process groups: DeepSpeed's destroy_process_group also drops the group handles it keeps."""
    if engine is not None:
        try:
            engine.destroy()
        except Exception as e:  # noqa: BLE001 - the process groups must still go
            log.warning("DeepSpeed engine teardown failed: %s", e)
    if not (world.distributed and dist.is_initialized()):
        return
    if engine is not None:
        import deepspeed.comm

        deepspeed.comm.destroy_process_group()
    else:
        dist.destroy_process_group()
