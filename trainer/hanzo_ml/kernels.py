"""The fast path of a chat training step: attention that skips what packing masks, fused kernels, and a loss that
never materializes the logits of the whole batch.

Three choices, made once per job from the device, the method and the model (`plan_step`), each with the reason
for its fallback logged:

attention (hardware.attention)
    flex   FlexAttention with a document block mask built from the packed rows' example boundaries: the masked
           (other-example) blocks are skipped, not computed and discarded. CUDA only, packed chat methods only
           (FlexAttention has no backward on CPU in torch 2.15, and the preference methods run trl's batches).
    sdpa   today's path: a dense (B, 1, T, T) block-diagonal mask (packed) or the padding mask, through SDPA.
kernels (hardware.kernels)
    liger  Liger kernels (liger-kernel, a maintained Triton library) for RMSNorm, rotary embedding and SwiGLU:
           one kernel each instead of several elementwise ones. CUDA only, the model types Liger patches.
    none   the model's own modules.
compile (hardware.compile)
    Each decoder layer compiled by torch.compile (inductor), which fuses the norms, the rotary embedding, the
    MLP's activation, the residual adds and autocast's casts itself: it replaces Liger (auto picks none). The
    layers share one compiled graph, so compile time does not grow with depth; packed rows are padded to one
    length so it is compiled once.
loss (no setting: it is exact, so it is used wherever it applies)
    The next-token NLL is computed from the final hidden states of the labelled positions only, through the LM
    head in chunks (`linear_cross_entropy`): each chunk's logits live only inside the loss, which returns its
    gradients already computed. Our own code rather than Liger's fused linear cross-entropy, because it is plain
    torch: it runs on every device, so the CPU tests cover the very code a GPU runs. It applies when the head is
    a bias-free linear layer the model does nothing else to (no logit soft-capping or scaling) and the model is
    not wrapped for distributed training (DDP and FSDP must see the whole forward); otherwise the model's
    logits are used, as before.
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from hanzo_ml.chat import IGNORE_INDEX
from hanzo_ml.errors import InputError
from hanzo_ml.memory import CHAT_METHODS, LOSS_CHUNK_BYTES

log = logging.getLogger(__name__)

FLEX_BLOCK = 128                     # FlexAttention's block: packed rows are padded to a multiple of it
# config attributes that change logits after the head: the chunked loss does not apply those
LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_softcapping", "logits_scaling", "logit_scale")


@dataclass(frozen=True)
class StepPlan:
    attention: str               # "flex" or "sdpa"
    kernels: str                 # "liger" or "none"
    compile: bool = False        # decoder layers compiled
    packed_length: int | None = None  # flex or compiled: packed rows padded to this many tokens (one shape)
    notes: tuple[str, ...] = ()  # why a choice fell back, for the job's log


def flex_unavailable(spec, device: torch.device) -> str | None:
    """Why FlexAttention cannot train this job here, or None when it can."""
    if spec.method not in CHAT_METHODS:
        return f"method {spec.method} runs trl's preference batches"
    if not spec.data.packing:
        return "data.packing is off (unpacked rows need only a padding mask)"
    if device.type != "cuda":
        return f"FlexAttention has no backward on {device.type}"
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: F401
    except ImportError:
        return f"torch {torch.__version__} has no FlexAttention"
    return None


def liger_unavailable(spec, device: torch.device, model_type: str) -> str | None:
    """Why Liger kernels cannot run this job here, or None when they can."""
    if spec.method not in CHAT_METHODS:
        return f"method {spec.method}'s loss runs through trl, left as it is"
    if device.type != "cuda":
        return f"Liger's Triton kernels need a CUDA device, not {device.type}"
    try:
        from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN
    except ImportError:
        return "the liger-kernel package is not installed (trainer/requirements-kernels.lock)"
    if model_type not in MODEL_TYPE_TO_APPLY_LIGER_FN:
        return f"Liger has no kernels for model type {model_type!r}"
    return None


def plan_step(spec, spec_path, device: torch.device, model_type: str) -> StepPlan:
    """hardware.attention / hardware.kernels resolved for this job; a choice that cannot run here is refused."""
    hardware = spec.hardware
    notes = []
    attention = resolve_choice(spec_path, "attention", getattr(hardware, "attention", "auto"), ("flex", "sdpa"),
                               flex_unavailable(spec, device), "attention: sdpa", notes)

    wanted_kernels = getattr(hardware, "kernels", "auto")
    compiled = bool(getattr(hardware, "compile", False))
    if compiled and wanted_kernels == "liger":
        raise InputError(f"{spec_path}: hardware.kernels: liger with hardware.compile true: the compiler fuses "
                         "what Liger fuses, and does not trace Liger's Triton kernels; choose one")
    liger_reason = "hardware.compile fuses them" if compiled else liger_unavailable(spec, device, model_type)
    kernels = resolve_choice(spec_path, "kernels", wanted_kernels, ("liger", "none"), liger_reason,
                             "kernels: the model's own", notes)
    length = spec.hyperparameters.max_seq_length
    packed_length = -(-length // FLEX_BLOCK) * FLEX_BLOCK if spec.data.packing and (attention == "flex" or compiled) \
        else None
    return StepPlan(attention, kernels, compiled, packed_length, tuple(notes))


def resolve_choice(spec_path, field: str, wanted: str, options: tuple[str, str], reason: str | None,
                   fallback_note: str, notes: list[str]) -> str:
    """hardware.<field>: the fast option where it runs (asked for, or auto), else the fallback; the fast option
    asked for where it cannot run is refused, and auto's fallback is noted with its reason."""
    fast, fallback = options
    if wanted == fast and reason:
        raise InputError(f"{spec_path}: hardware.{field}: {fast} cannot run this job: {reason} "
                         f"(use {fallback} or auto)")
    if wanted == "auto" and reason:
        notes.append(f"{fallback_note}, because {reason}")
    return fast if wanted in (fast, "auto") and not reason else fallback


def apply_plan(model, plan: StepPlan) -> None:
    """Switch the loaded model to the plan's attention and kernels (before the optimizer sees its parameters;
    neither changes a parameter)."""
    lm = causal_lm(model)
    # No KV cache in any forward of a training job (our loss, trl's preference losses, evaluation): none is ever
    # reused, and filling one layer by layer makes each compiled layer a graph of its own (a guard on its index),
    # so past dynamo's recompile limit the deeper layers run eager.
    lm.config.use_cache = False
    if plan.attention == "flex":
        lm.set_attn_implementation("flex_attention")
    if plan.kernels == "liger":
        from liger_kernel.transformers.monkey_patch import _apply_liger_kernel_to_instance

        # the loss is ours (linear_cross_entropy); Liger replaces the norms, the rotary embedding and the MLP
        _apply_liger_kernel_to_instance(model=lm, rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                        fused_linear_cross_entropy=False)
    if plan.compile:
        for layer in lm.get_decoder().layers:
            layer.compile()  # unpacked batches vary in length: after one recompile the length is dynamic
    model.packed_length = plan.packed_length
    for note in plan.notes:
        log.info("%s", note)
    log.info("step: attention %s, kernels %s, %s, loss %s", plan.attention, plan.kernels,
             "decoder layers compiled" if plan.compile else "eager",
             "chunked over labelled positions" if fused_loss_head(model) is not None else "from the full logits")


# ---- the model, unwrapped ------------------------------------------------------------------------

def causal_lm(model):
    """The transformers CausalLM inside a peft model (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def attention_implementation(model) -> str:
    lm = causal_lm(getattr(model, "module", model))
    return getattr(lm.config, "_attn_implementation", None) or "sdpa"


def fused_loss_head(model):
    """The LM head the chunked loss may multiply with directly, or None when the model's own logits are needed."""
    if hasattr(model, "module") or (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return None  # DDP, FSDP and DeepSpeed must run the whole forward (their hooks gather and sync)
    lm = causal_lm(model)
    if not hasattr(lm, "get_output_embeddings") or not hasattr(lm, "get_decoder"):
        return None
    head = lm.get_output_embeddings()
    if type(head) is not torch.nn.Linear or head.bias is not None:
        return None  # a bias, or an adapter on the head itself (peft wraps it in its own layer)
    config = lm.config.get_text_config() if hasattr(lm.config, "get_text_config") else lm.config
    if any(getattr(config, name, None) not in (None, 1, 1.0) for name in LOGIT_TRANSFORMS):
        return None
    return head


# ---- attention inputs --------------------------------------------------------------------------

def document_mask(segment_ids: torch.Tensor) -> torch.Tensor:
    """(B, T) example index per token (-1 padding) -> (B, 1, T, T) booleans: a token sees the earlier tokens of
    its own example; padding sees only itself, so no softmax row is empty (all -inf would give NaN)."""
    length = segment_ids.size(1)
    positions = torch.arange(length, device=segment_ids.device)
    causal = positions[:, None] >= positions[None, :]                                   # (T, T)
    same = (segment_ids[:, :, None] == segment_ids[:, None, :]) & (segment_ids[:, :, None] >= 0)  # (B, T, T)
    eye = positions[:, None] == positions[None, :]
    return ((same & causal) | eye)[:, None]                                             # (B, 1, T, T)


def document_block_mask(segment_ids: torch.Tensor):
    """The same mask as `document_mask`, as a FlexAttention BlockMask: blocks where no query sees a key are
    skipped by the kernel. segment_ids: (B, T) with T a multiple of FLEX_BLOCK."""
    from torch.nn.attention.flex_attention import create_block_mask

    def same_example_causal(b, h, q, k):
        same = (segment_ids[b, q] == segment_ids[b, k]) & (segment_ids[b, q] >= 0)
        return (same & (q >= k)) | (q == k)

    batch, length = segment_ids.shape
    return create_block_mask(same_example_causal, batch, None, length, length, device=segment_ids.device)


def padded_to_block(batch: dict[str, torch.Tensor], packed_length: int) -> dict[str, torch.Tensor]:
    """A packed batch right-padded to packed_length tokens (max_seq_length rounded up to FlexAttention's block):
    one shape, so the compiled kernels are reused. Padding is an example of its own (-1), never a target."""
    length = batch["input_ids"].size(1)
    extra = packed_length - length
    if not extra:
        return batch
    fill = {"labels": IGNORE_INDEX, "segment_ids": -1}
    return {k: F.pad(v, (0, extra), value=fill.get(k, 0)) if torch.is_tensor(v) and v.dim() == 2 else v
            for k, v in batch.items()}


def padded_packed(model, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A packed batch at the plan's one length (apply_plan set it on the model), other batches as they are."""
    length = getattr(model, "packed_length", None)
    return padded_to_block(batch, length) if length and "segment_ids" in batch else batch


def model_inputs(model, batch: dict[str, torch.Tensor]) -> dict:
    """input_ids, attention_mask (and position_ids for packed rows) in the form the model's attention takes.
    batch is already on the model's device. No KV cache: training never reuses one, and filling it per layer
    makes every compiled layer a different graph."""
    inputs = {"input_ids": batch["input_ids"], "use_cache": False}
    if "segment_ids" not in batch:
        inputs["attention_mask"] = batch["attention_mask"]
        return inputs
    segments = batch["segment_ids"]
    flex = attention_implementation(model) == "flex_attention"
    inputs["attention_mask"] = document_block_mask(segments) if flex else document_mask(segments)
    inputs["position_ids"] = batch["position_ids"]
    return inputs


# ---- the loss --------------------------------------------------------------------------------------

def with_loss_positions(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch (still on the CPU) with the (row, column) of every labelled position of labels[:, 1:]: found
    here, where it costs no GPU synchronization, rather than by boolean indexing on the device mid-forward (which
    waits for the forward to finish before the backward can be queued)."""
    rows, columns = (batch["labels"][:, 1:] != IGNORE_INDEX).nonzero(as_tuple=True)
    return {**batch, "loss_rows": rows, "loss_columns": columns}


def summed_nll(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Sum of the next-token NLL over labelled tokens (float32 scalar). batch is on the model's device."""
    batch = padded_packed(model, batch)
    inputs = model_inputs(model, batch)
    targets = batch["labels"][:, 1:]                                  # (B, T-1): position t predicts token t+1
    head = fused_loss_head(model)
    if head is None:
        logits = model(**inputs).logits[:, :-1, :].float()           # (B, T-1, V)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1),
                               ignore_index=IGNORE_INDEX, reduction="sum")
    if "loss_rows" in batch:
        rows, columns = batch["loss_rows"], batch["loss_columns"]                  # (N,), (N,)
    else:
        rows, columns = (targets != IGNORE_INDEX).nonzero(as_tuple=True)
    with forward_autocast(model):
        hidden = causal_lm(model).get_decoder()(**inputs).last_hidden_state[:, :-1]  # (B, T-1, H)
        return linear_cross_entropy(hidden[rows, columns], head.weight, targets[rows, columns])  # (N, H), (N,)


def forward_autocast(model):
    """The autocast the model's forward runs under (recipes.components.autocast_forward), for code that calls
    the model's parts directly."""
    dtype = getattr(model, "autocast_dtype", None)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(next(model.parameters()).device.type, dtype=dtype)


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """sum_i NLL(softmax(hidden_i @ weight.T), targets_i), computed in row chunks. hidden: (N, H), weight: (V, H),
    targets: (N,). The logits of one chunk at a time exist, in float32, as in the reference
    `cross_entropy(logits.float())`; the matrix products run in the autocast dtype when autocast is on."""
    rows = max(1, LOSS_CHUNK_BYTES // (4 * weight.size(0)))
    return LinearCrossEntropy.apply(hidden, weight, targets, rows, torch.is_grad_enabled())


class LinearCrossEntropy(torch.autograd.Function):
    """Forward computes the loss and, chunk by chunk, its gradients with respect to hidden and weight (softmax
    minus one-hot, times the other operand); backward only scales them by the incoming gradient. So the full
    (N, V) logits never exist, forward or backward."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, rows, grad_enabled):
        device_type = hidden.device.type
        dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else \
            torch.promote_types(hidden.dtype, weight.dtype)
        want_hidden, want_weight = (grad_enabled and ctx.needs_input_grad[0]), (grad_enabled and ctx.needs_input_grad[1])
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if want_weight else None
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        w = weight.to(dtype)
        with torch.autocast(device_type, enabled=False):
            for start in range(0, hidden.size(0), rows):
                h, t = hidden[start:start + rows].to(dtype), targets[start:start + rows]
                logits = (h @ w.t()).float()                                    # (n, V)
                log_z = torch.logsumexp(logits, dim=-1)                         # (n,)
                total += (log_z - logits.gather(1, t[:, None]).squeeze(1)).sum()
                if not (want_hidden or want_weight):
                    continue
                grad = torch.exp(logits - log_z[:, None])                       # softmax, (n, V)
                grad[torch.arange(t.numel(), device=t.device), t] -= 1.0        # minus the one-hot target
                grad = grad.to(dtype)
                if want_hidden:
                    grad_hidden[start:start + rows] = (grad @ w).to(hidden.dtype)
                if want_weight:
                    grad_weight += (grad.t() @ h).float()
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype = weight.dtype
        return total

    @staticmethod
    def backward(ctx, grad_output):
        grad_hidden, grad_weight = ctx.saved_tensors
        return (grad_hidden * grad_output.to(grad_hidden.dtype) if grad_hidden is not None else None,
                (grad_weight * grad_output).to(ctx.weight_dtype) if grad_weight is not None else None,
                None, None, None)
