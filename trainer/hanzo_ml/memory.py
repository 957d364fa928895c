"""Memory, time and cost of a training job, estimated before it starts.

    estimate(spec, device_memory_bytes) -> Estimate

Per device, in bytes: frozen/trained weights, adapter, gradients, AdamW states, activations at
max_seq_length x micro-batch, plus a fixed fraction for the allocator and the CUDA context. Before any weight is
loaded the trainer sizes its micro-batch from the estimate (check_fits: on a GPU, the largest that fits, up to the
step's items) or refuses a job that does not fit, naming the largest micro-batch that would. Recipe templates
(recipes/*.yaml) carry the numbers this module computes for them.

Torch-free: `python -m hanzo_ml recipe` renders templates without loading torch.

Sources for the terms: weights/gradients/AdamW bytes per parameter as in ZeRO (Rajbhandari et al. 2020);
activations per layer s*b*h*(34 + 5*a*s/h) bytes at 16 bits without recomputation (Korthikanti et al. 2022),
scaled for float32; NF4 with double quantization 4 + 8/64 + 32/(64*256) bits per weight (Dettmers et al. 2023).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from hanzo_ml.errors import InputError

GIB = 1024 ** 3
ADAPTER_METHODS = ("lora", "qlora", "adalora", "dpo", "orpo")
PREFERENCE_METHODS = ("dpo", "orpo")
CHAT_METHODS = ("full", "lora", "qlora", "adalora")
LOSS_CHUNK_BYTES = 256 * 2 ** 20  # float32 logits of one chunk of the chunked loss (hanzo_ml.kernels)
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
OVERHEAD_FRACTION = 0.10      # allocator fragmentation, CUDA context, kernels' workspaces
ASSUMED_MFU = 0.40            # model FLOPs utilization assumed for time estimates (well-tuned dense training)
NF4_DOUBLE_QUANT_BITS = 4 + 8 / 64 + 32 / (64 * 256)  # 4-bit codes, 8-bit absmax per 64, fp32 per 256 absmax
NF4_BITS = 4 + 32 / 64                                # 4-bit codes, fp32 absmax per block of 64
SHARDED_STRATEGIES = ("fsdp", "deepspeed_zero3")      # weights, gradients and optimizer states split over devices
STATE_SHARDED_STRATEGIES = SHARDED_STRATEGIES + ("deepspeed_zero2",)  # ZeRO-2: gradients and optimizer states only
DEEPSPEED_STRATEGIES = ("deepspeed_zero2", "deepspeed_zero3")


@dataclass(frozen=True)
class ModelShape:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tie_embeddings: bool = False

    def projection(self, name: str) -> tuple[int, int]:
        """(in, out) features of a decoder layer's linear projection."""
        h, q, kv, i = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim, \
            self.intermediate_size
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}[name]

    @property
    def linear_params(self) -> int:
        """Parameters in the decoder layers' projections (what 4-bit quantization applies to)."""
        return self.num_layers * sum(a * b for a, b in map(self.projection, PROJECTIONS))

    @property
    def params(self) -> int:
        embeddings = self.vocab_size * self.hidden_size * (1 if self.tie_embeddings else 2)
        norms = (2 * self.num_layers + 1) * self.hidden_size
        return self.linear_params + embeddings + norms


# Architectures recipe templates name: the bundled base (hanzo_ml/base_model.py) and the spec-000 recipe table
# (Qwen2-family shapes at 7B and 72B).
KNOWN_SHAPES = {
    "hanzo-tiny-llama": ModelShape(vocab_size=2039, hidden_size=256, intermediate_size=768, num_layers=4,
                                   num_heads=4, num_kv_heads=4, head_dim=64),
    "zen-7b": ModelShape(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_layers=28,
                         num_heads=28, num_kv_heads=4, head_dim=128),
    "zen-72b": ModelShape(vocab_size=152064, hidden_size=8192, intermediate_size=29568, num_layers=80,
                          num_heads=64, num_kv_heads=8, head_dim=128),
}


def shape_from_config(config: dict) -> ModelShape:
    heads = config["num_attention_heads"]
    return ModelShape(vocab_size=config["vocab_size"], hidden_size=config["hidden_size"],
                      intermediate_size=config["intermediate_size"], num_layers=config["num_hidden_layers"],
                      num_heads=heads, num_kv_heads=config.get("num_key_value_heads") or heads,
                      head_dim=config.get("head_dim") or config["hidden_size"] // heads,
                      tie_embeddings=bool(config.get("tie_word_embeddings", False)))


def shape_of(model: str) -> ModelShape:
    """A known architecture name, or a model directory holding config.json."""
    if model in KNOWN_SHAPES:
        return KNOWN_SHAPES[model]
    config = Path(model) / "config.json"
    if not config.is_file():
        raise InputError(f"model {model!r}: neither a known architecture ({', '.join(KNOWN_SHAPES)}) nor a model "
                         "directory with config.json")
    return shape_from_config(json.loads(config.read_text(encoding="utf-8")))


@dataclass(frozen=True)
class Estimate:
    """Bytes per device, and the run's time and cost. Rounded to whole bytes / 4 significant digits."""
    weights: int
    adapter: int
    gradients: int
    optimizer: int
    activations: int
    overhead: int
    total: int
    devices: int
    trainable_params: int
    max_micro_batch: int | None        # largest micro-batch that fits device_memory; None when none was given
    tokens: int                        # tokens the run trains on (every device together)
    hours: float | None                # wall-clock at ASSUMED_MFU; None without peak FLOP/s
    cost_usd: float | None             # hours x devices x price; None without a price

    def as_dict(self) -> dict:
        return asdict(self)


def weight_bytes_per_param(spec) -> float:
    """Bytes of one base weight as the trainer holds it: bfloat16 under bf16 precision for the frozen base of an
    adapter method (recipes.components.frozen_base_dtype) and for full fine-tuning on bf16 weights
    (bf16_weights_expected; its float32 masters count with the optimizer); float32 otherwise: with fp32 precision
    (auto on a CPU) and for full fine-tuning on float32 weights under autocast."""
    bf16 = spec.method in ADAPTER_METHODS or bf16_weights_expected(spec)
    return 2.0 if bf16_expected(spec) and bf16 else 4.0


def bf16_expected(spec) -> bool:
    """The forward's precision (recipes.components.resolve_precision), predicted without torch: bf16 when asked
    for, and for auto on a GPU (assumed to support bf16); float32 otherwise."""
    precision = getattr(spec.hardware, "precision", "auto")
    return precision == "bf16" or (precision == "auto" and device_kind(spec) == "cuda")


def bf16_weights_expected(spec) -> bool:
    """The trainer's hardware.weights choice (hanzo_ml.master_weights), predicted without torch: bf16 weights with
    float32 masters for full fine-tuning in one process under bf16 precision, unless it says fp32."""
    hardware = spec.hardware
    return (spec.method == "full" and getattr(hardware, "weights", "auto") != "fp32" and bf16_expected(spec)
            and hardware.nodes * max(1, hardware.processes) == 1)


def activation_bytes_per_value(spec) -> float:
    """Activations follow the forward pass's precision: bf16 under bf16 autocast, float32 otherwise."""
    return 2.0 if bf16_expected(spec) else 4.0


def device_kind(spec) -> str:
    hardware = spec.hardware
    if hardware.device == "cpu" or (hardware.device == "auto" and hardware.gpus_per_node == 0):
        return "cpu"
    return "cuda"


def adapter_params(spec, shape: ModelShape) -> int:
    hp = spec.hyperparameters
    modules = [m for m in hp.target_modules if m in PROJECTIONS]
    if spec.method == "adalora":
        rank = spec.adalora.init_rank if getattr(spec, "adalora", None) else 12
        per_layer = sum(rank * (a + b) + rank for a, b in map(shape.projection, modules))  # P, Q and E
    else:
        per_layer = sum(hp.lora_rank * (a + b) for a, b in map(shape.projection, modules))  # A and B
    return shape.num_layers * per_layer


def flex_attention_expected(spec) -> bool:
    """The trainer's attention choice (hanzo_ml.kernels.plan_step), predicted without torch: FlexAttention for
    packed chat methods on a CUDA device unless hardware.attention says sdpa."""
    return (getattr(spec.hardware, "attention", "auto") != "sdpa" and device_kind(spec) == "cuda"
            and getattr(getattr(spec, "data", None), "packing", False) and spec.method in CHAT_METHODS)


def chunked_loss_expected(spec) -> bool:
    """The chunked loss over labelled positions (hanzo_ml.kernels.summed_nll) runs for chat methods in one process;
    distributed jobs compute the model's full logits."""
    hardware = spec.hardware
    return spec.method in CHAT_METHODS and hardware.nodes * max(1, hardware.processes) == 1


def activation_bytes(spec, shape: ModelShape, micro_batch: int) -> int:
    """Stored activations for one micro-batch: per layer s*b*h*34 at 16 bits (with gradient checkpointing: each
    layer's input plus one layer in full), plus the attention scores 5*a*s*s*b unless FlexAttention computes
    them block by block without storing them, plus the logits: the float32 logits of every position and their
    gradient, or with the chunked loss one chunk of them and the hidden states' gradient.
    Preference methods run chosen and rejected rows: twice the batch."""
    s, h, a = spec.hyperparameters.max_seq_length, shape.hidden_size, shape.num_heads
    b = micro_batch * (2 if spec.method in PREFERENCE_METHODS else 1)
    scale = activation_bytes_per_value(spec) / 2.0  # the formula counts 2-byte activations
    scores = 0 if flex_attention_expected(spec) else 5 * a * s / h
    per_layer = s * b * h * (34 + scores) * scale
    if chunked_loss_expected(spec):
        logits = 2 * min(LOSS_CHUNK_BYTES, s * b * shape.vocab_size * 4) + s * b * h * 4
    else:
        logits = 2 * s * b * shape.vocab_size * 4
    if getattr(spec.hyperparameters, "gradient_checkpointing", False):
        # Each layer keeps only its input (s*b*h values); one layer at a time is recomputed in full.
        return int(shape.num_layers * s * b * h * 2 * scale + per_layer + logits)
    return int(shape.num_layers * per_layer + logits)


def estimate(spec, device_memory_bytes: int | None = None, shape: ModelShape | None = None) -> Estimate:
    """The memory one device needs for this job (and the largest micro-batch that fits device_memory_bytes)."""
    shape = shape or shape_of(spec.base_model_path)
    hardware, hp = spec.hardware, spec.hyperparameters
    devices = max(1, hardware.nodes * max(1, hardware.gpus_per_node))
    strategy = getattr(hardware, "strategy", "ddp")
    weight_shard = devices if strategy in SHARDED_STRATEGIES else 1
    state_shard = devices if strategy in STATE_SHARDED_STRATEGIES else 1
    wbytes = weight_bytes_per_param(spec)

    if spec.method == "qlora":
        q = getattr(spec, "quantization", None)
        bits = NF4_DOUBLE_QUANT_BITS if (q is None or q.double_quant) else NF4_BITS
        # what is not 4-bit (embeddings, norms, head) is frozen like LoRA's base (recipes.qlora.build_model)
        weights = shape.linear_params * bits / 8 + (shape.params - shape.linear_params) * wbytes
    else:
        weights = shape.params * wbytes
    if spec.method in ADAPTER_METHODS:
        trainable = adapter_params(spec, shape)
        adapter = trainable * 4            # adapters train in float32
        gradients = trainable * 4
        optimizer = trainable * 8          # AdamW: two float32 moments
    else:
        trainable = shape.params
        adapter = 0
        gradients = trainable * 4          # float32, like the weights they update
        optimizer = trainable * 8          # AdamW: two float32 moments
        if bf16_weights_expected(spec):
            optimizer += trainable * 4     # the float32 master of each bf16 weight
    if strategy in DEEPSPEED_STRATEGIES:
        optimizer += trainable * 4         # ZeRO's own float32 master copy of each rank's partition
    fixed = weights / weight_shard + (gradients + optimizer) / state_shard + adapter

    def total_at(micro_batch: int) -> tuple[int, int]:
        activations = activation_bytes(spec, shape, micro_batch)
        return activations, int((fixed + activations) * (1 + OVERHEAD_FRACTION))

    activations, total = total_at(hp.batch_size)
    max_micro_batch = None
    if device_memory_bytes is not None:
        max_micro_batch = 0
        for micro_batch in range(1, max(hp.batch_size * 64, effective_batch(spec)) + 1):
            if total_at(micro_batch)[1] > device_memory_bytes:
                break
            max_micro_batch = micro_batch

    tokens = hp.max_steps * hp.batch_size * hp.gradient_accumulation_steps * hp.max_seq_length * devices
    hours, cost = run_time_and_cost(spec, shape, trainable, tokens, devices)
    return Estimate(weights=int(weights / weight_shard), adapter=int(adapter), gradients=int(gradients / state_shard),
                    optimizer=int(optimizer / state_shard), activations=activations,
                    overhead=total - int(fixed + activations), total=total, devices=devices,
                    trainable_params=int(trainable), max_micro_batch=max_micro_batch, tokens=tokens,
                    hours=hours, cost_usd=cost)


def run_time_and_cost(spec, shape: ModelShape, trainable: int, tokens: int,
                      devices: int) -> tuple[float | None, float | None]:
    """FLOPs per token: forward 2N and backward 4N when every weight trains; with adapters the backward still
    passes activation gradients through the frozen weights (2N) but computes weight gradients only for the
    adapter. Preference methods process two answers per pair; DPO adds a reference forward per answer."""
    n = shape.params
    per_token = 6 * n if spec.method == "full" else 4 * n + 6 * trainable
    if spec.method == "dpo":
        per_token += 2 * n
    peak = getattr(spec.hardware, "peak_flops_per_device", None)
    if not peak:
        return None, None
    hours = round_sig(tokens * per_token / (devices * peak * ASSUMED_MFU) / 3600)
    price = getattr(spec.hardware, "price_per_device_hour_usd", None)
    return hours, (round_sig(hours * devices * price) if price is not None else None)


def round_sig(value: float, digits: int = 4) -> float:
    return float(f"{value:.{digits}g}")


def device_memory(spec, device) -> int:
    """hardware.device_memory_gb if given; else the GPU's memory, or on CPU the host's physical RAM."""
    import os

    if spec.hardware.device_memory_gb is not None:
        return int(spec.hardware.device_memory_gb * GIB)
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def effective_batch(spec) -> int:
    """Items (examples, or packed rows) one optimizer step sees in one process."""
    return spec.hyperparameters.batch_size * spec.hyperparameters.gradient_accumulation_steps


def chooses_micro_batch(spec, device) -> bool:
    """hardware.micro_batch auto: a single-process job on a CUDA device sizes its micro-batches to the device;
    on a CPU (host memory is not the limit worth filling) and across processes the recipe's batch_size holds."""
    hardware = spec.hardware
    return (getattr(hardware, "micro_batch", "auto") == "auto" and getattr(device, "type", "cpu") == "cuda"
            and hardware.nodes * max(1, hardware.processes) == 1)


def check_fits(spec, spec_path: Path, device) -> int:
    """The micro-batch the job runs with, or InputError, before any weight is loaded, when even the smallest
    does not fit one device. With hardware.micro_batch auto (see chooses_micro_batch) it is the largest that the
    estimate fits, at most the step's items: the step's examples are the same on every device, split into as
    few micro-batches as fit, so results do not depend on the GPU. Otherwise it is hyperparameters.batch_size."""
    config = Path(spec.base_model_path) / "config.json"
    if not config.is_file():
        raise InputError(f"{spec_path}: base_model_path: {spec.base_model_path} has no config.json (not a model "
                         "directory)")
    available = device_memory(spec, device)
    result = estimate(spec, available, shape_from_config(json.loads(config.read_text(encoding="utf-8"))))
    if chooses_micro_batch(spec, device) and result.max_micro_batch:
        # a divisor of the step's items: equal micro-batches, so objectives that average per micro-batch
        # (AdaLoRA's, the preference losses) weigh every item as the recipe's own split does
        step = effective_batch(spec)
        return max(d for d in range(1, min(step, result.max_micro_batch) + 1) if step % d == 0)
    if result.total > available or not result.max_micro_batch:
        advice = (f"lower hyperparameters.batch_size to {result.max_micro_batch} (and raise "
                  "gradient_accumulation_steps to keep the effective batch)" if result.max_micro_batch
                  else "use a method that trains fewer weights (lora, qlora), a shorter max_seq_length or more "
                       "devices")
        raise InputError(f"{spec_path}: hardware: method {spec.method} needs about {result.total / GIB:.1f} GiB per "
                         f"device (weights {result.weights / GIB:.1f}, optimizer {result.optimizer / GIB:.1f}, "
                         f"activations {result.activations / GIB:.1f}); this device has {available / GIB:.1f} "
                         f"GiB; {advice}")
    return spec.hyperparameters.batch_size
