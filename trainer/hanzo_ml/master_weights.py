"""Full fine-tuning on bfloat16 weights with float32 master weights (hardware.weights).

Under bf16 autocast with float32 weights (the Accelerate / transformers Trainer way, and ours with weights fp32)
every projection casts its weight to bf16 in each forward and its gradient back to float32 in each backward, and
the embeddings, norms and residual adds run in float32: the residual stream is float32, twice the bytes of every
elementwise kernel and of what it keeps for the backward pass. With weights bf16 the model holds bfloat16 copies
of its weights, so the forward and backward run in bf16 throughout (as an adapter method's bf16 base already
does), while what is trained stays float32:

    - each weight's bf16 gradient is added into its float32 master's gradient as soon as backward produces it
      (a post-accumulate hook; the bf16 one is freed), so gradient accumulation over micro-batches sums in
      float32, as before;
    - clipping, AdamW and its two moments see only the float32 masters;
    - after each optimizer step the masters are rounded into the model's bf16 weights;
    - checkpoints and the final model hold the float32 masters, in the same files as before, so a checkpoint
      resumes bit-exactly (the bf16 weights are a pure function of the masters) and moves between weights
      settings.

Memory per trained parameter: 2 (bf16 weight) + 4 (master) + 4 (master gradient) + 8 (moments) = 18 bytes, which
hanzo_ml/memory.py counts, against 4 + 4 + 8 = 16 counted for float32 weights under autocast (which also hold the
bf16 copy each projection keeps for its backward, 2 more, uncounted); the activations kept for the backward pass
are fewer, since the residual stream is bf16 (bench/results/trainer-step-traffic.md). Weights a model asks to keep
in float32 (transformers' _keep_in_fp32_modules, such as a mixture-of-experts router) stay float32 and are
trained as they are, without a master.
"""
from __future__ import annotations

import logging

import torch

from hanzo_ml.errors import InputError
from hanzo_ml.kernels import resolve_choice

log = logging.getLogger(__name__)

WEIGHT_DTYPE = torch.bfloat16


def bf16_unavailable(spec, precision: torch.dtype | None) -> str | None:
    """Why this job cannot train on bf16 weights, or None when it can."""
    if spec.method != "full":
        return (f"method {spec.method} trains float32 adapters over a frozen base that is already held in the "
                "forward pass's precision")
    if precision != torch.bfloat16:
        return "hardware.precision resolves to fp32 here (bf16 weights need bf16 autocast)"
    hardware = spec.hardware
    if hardware.nodes * max(1, hardware.processes) > 1:
        return (f"strategy {hardware.strategy} across processes keeps its own precision handling of float32 "
                "weights")
    return None


def wants_bf16_weights(spec, spec_path, precision: torch.dtype | None) -> bool:
    """hardware.weights resolved for this job: bf16 where it applies (asked for, or auto), else fp32; bf16 asked
    for where it cannot apply is refused. auto's fallback is logged with its reason for full fine-tuning (adapter
    methods have no trained base weights to hold either way)."""
    notes: list[str] = []
    bf16 = resolve_choice(spec_path, "weights", getattr(spec.hardware, "weights", "auto"), ("bf16", "fp32"),
                          bf16_unavailable(spec, precision), "weights: fp32 under autocast", notes) == "bf16"
    for note in notes if spec.method == "full" else []:
        log.info("%s", note)
    return bf16


class MasterWeights:
    """The model's trained parameters held in bf16, each with a float32 master the optimizer updates.

    Built once the model's float32 weights are final for this start (loaded, and restored from a checkpoint), and
    before the optimizer: `parameters` is what the optimizer and gradient clipping take."""

    def __init__(self, model, dtype: torch.dtype = WEIGHT_DTYPE):
        self.model = model
        # named_parameters lists a tied weight (embeddings and head) once: one master for both names
        trained = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        kept = kept_in_float32(model)
        self.names = [name for name, _ in trained]
        # what the optimizer takes, in the model's parameter order (optimizer.pt keys by this index, as before)
        self.parameters = [p if name in kept else torch.nn.Parameter(p.detach().float().clone())
                           for name, p in trained]
        self.working, self.masters = [], []  # the pairs a step copies between
        for (name, weight), master in zip(trained, self.parameters):
            if name in kept:
                continue
            weight.data = weight.data.to(dtype)
            weight.register_post_accumulate_grad_hook(self._into_master(master))
            self.working.append(weight)
            self.masters.append(master)

    @staticmethod
    def _into_master(master: torch.nn.Parameter):
        def accumulate(weight: torch.Tensor) -> None:
            if master.grad is None:
                master.grad = weight.grad.float()
            else:
                master.grad.add_(weight.grad)
            weight.grad = None
        return accumulate

    @torch.no_grad()
    def copy_to_model(self) -> None:
        """After an optimizer step: the updated masters, rounded to bf16, become the weights the model reads."""
        torch._foreach_copy_(self.working, self.masters)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The model's state dict with the float32 masters in place of its bf16 weights (what checkpoints and the
        final model hold); buffers as they are. A tied weight appears under both its names, as in the model's."""
        master_of = {id(w): m for w, m in zip(self.working, self.masters)}
        return {name: master_of.get(id(tensor), tensor).detach()
                for name, tensor in self.model.state_dict(keep_vars=True).items()}

    @torch.no_grad()
    def release_to_model(self) -> None:
        """At the end of training: the masters themselves become the model's weights (no copy), so the final
        model is saved exactly as a float32 run saves it (float32 tensors, float32 in config.json)."""
        for weight, master in zip(self.working, self.masters):
            weight.data = master.data

    def optimizer_state_by_index(self, saved: dict, source) -> dict:
        """An optimizer state keyed by parameter name (what an fsdp run checkpoints) keyed by index into
        `parameters` instead, as optimizer.load_state_dict takes it: torch's name-keyed loader maps names to the
        model's own parameters, which the masters are not. An index-keyed state is returned as it is."""
        groups = saved.get("param_groups") or []
        if not any(isinstance(p, str) for group in groups for p in group.get("params", [])):
            return saved
        index = {name: i for i, name in enumerate(self.names)}
        unknown = sorted({p for group in groups for p in group["params"]} - set(index))
        if unknown:
            raise InputError(f"{source}: optimizer.pt names parameters this model does not train: {unknown[:3]}")
        return {"state": {index[name]: value for name, value in saved.get("state", {}).items()},
                "param_groups": [{**group, "params": [index[name] for name in group["params"]]}
                                 for group in groups]}


def kept_in_float32(model) -> set[str]:
    """Names of the parameters in the modules the model's class keeps in float32 whatever the load dtype."""
    modules = set(getattr(model, "_keep_in_fp32_modules", None) or []) | \
        set(getattr(model, "_keep_in_fp32_modules_strict", None) or [])
    return {name for name, _ in model.named_parameters() if any(f".{m}." in f".{name}." for m in modules)}
