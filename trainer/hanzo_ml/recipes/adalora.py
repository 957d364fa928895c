"""AdaLoRA: SVD-shaped adapters (P diag(E) Q) whose rank budget moves during training to the matrices that
matter most (peft AdaLoraConfig). After every optimizer step, before gradients are cleared, peft's
update_and_allocate scores each singular value and masks the least important ones down to the schedule's budget.

The loss is peft's: the model is called with labels, so AdaLoRA adds its orthogonality regularizer on P and Q to
the token-mean NLL of each micro-batch (averaged over the micro-batches of a step).
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import torch

from hanzo_ml.errors import InputError
from hanzo_ml.kernels import model_inputs, padded_packed
from hanzo_ml.modeling import load_causal_lm
from hanzo_ml.recipes import Recipe
from hanzo_ml.recipes.components import (AdapterWeights, ChatObjective, attach_adapter, frozen_base_dtype,
                                         load_chat_datasets, model_device, to_device)

DEFAULTS = SimpleNamespace(init_rank=12, target_rank=4, tinit=0, tfinal=0, delta_t=1, beta1=0.85, beta2=0.85,
                           orth_reg_weight=0.5)
ALLOCATOR_STATE = "adalora_allocator.pt"


def settings(spec):
    return spec.adalora if getattr(spec, "adalora", None) is not None else DEFAULTS


def check(spec, spec_path: Path) -> None:
    """peft needs steps between the full-rank warmup and the final fixed budget to allocate in."""
    a, max_steps = settings(spec), spec.hyperparameters.max_steps
    if a.tinit + a.tfinal >= max_steps:
        raise InputError(f"{spec_path}: adalora.tinit + adalora.tfinal ({a.tinit} + {a.tfinal}) must be less than "
                         f"hyperparameters.max_steps ({max_steps}): no steps would be left to reallocate the budget")
    if a.target_rank > a.init_rank:
        raise InputError(f"{spec_path}: adalora.target_rank ({a.target_rank}) must not exceed adalora.init_rank "
                         f"({a.init_rank})")


def build_model(spec, spec_path: Path, device):
    from peft import AdaLoraConfig

    hp, a = spec.hyperparameters, settings(spec)
    config = AdaLoraConfig(init_r=a.init_rank, target_r=a.target_rank, tinit=a.tinit, tfinal=a.tfinal,
                           deltaT=a.delta_t, beta1=a.beta1, beta2=a.beta2, orth_reg_weight=a.orth_reg_weight,
                           total_step=hp.max_steps, lora_alpha=hp.lora_alpha, lora_dropout=hp.lora_dropout,
                           target_modules=list(hp.target_modules), task_type="CAUSAL_LM")
    base = load_causal_lm(Path(spec.base_model_path), frozen_base_dtype(spec, device)).to(device)
    return attach_adapter(base, config, spec_path, hp)


class AdaLoraObjective(ChatObjective):
    def micro_batch_losses(self, model, micro_batches: list[dict]) -> Iterator[torch.Tensor]:
        device = model_device(model)
        for batch in micro_batches:
            batch = to_device(batch, device)
            batch = padded_packed(model, batch)
            kwargs = {**model_inputs(model, batch), "labels": batch["labels"]}
            yield model(**kwargs).loss / len(micro_batches)  # NLL mean + orth_reg_weight * regularizer


def update_budget(model, step: int) -> None:
    """step: optimizer steps done before this one (peft's global_step counts from 0)."""
    model.base_model.update_and_allocate(step)


def save_allocator(model, directory: Path) -> None:
    allocator = model.base_model.rankallocator
    config = model.peft_config[model.active_adapter]
    torch.save({"ipt": allocator.ipt, "exp_avg_ipt": allocator.exp_avg_ipt, "exp_avg_unc": allocator.exp_avg_unc,
                "rank_pattern": config.rank_pattern}, directory / ALLOCATOR_STATE)


def load_allocator(model, directory: Path) -> None:
    state = torch.load(directory / ALLOCATOR_STATE, weights_only=True)
    allocator = model.base_model.rankallocator
    allocator.ipt, allocator.exp_avg_ipt, allocator.exp_avg_unc = (state["ipt"], state["exp_avg_ipt"],
                                                                   state["exp_avg_unc"])
    model.peft_config[model.active_adapter].rank_pattern = state["rank_pattern"]


RECIPE = Recipe(
    method="adalora",
    data_form="chat",
    load_data=load_chat_datasets,
    build_model=build_model,
    objective=lambda spec, model, data: AdaLoraObjective(data.collate),
    weights=AdapterWeights(),
    check=check,
    after_optimizer_step=update_budget,
    save_extra=save_allocator,
    load_extra=load_allocator,
)
