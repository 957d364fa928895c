"""LoRA: low-rank adapters on the chosen projections of a frozen base (peft). The default method."""
from __future__ import annotations

from pathlib import Path

from hanzo_ml.modeling import load_causal_lm
from hanzo_ml.recipes import Recipe
from hanzo_ml.recipes.components import (AdapterWeights, ChatObjective, attach_adapter, frozen_base_dtype,
                                          load_chat_datasets, lora_config)


def build_model(spec, spec_path: Path, device):
    base = load_causal_lm(Path(spec.base_model_path), frozen_base_dtype(spec, device)).to(device)
    return attach_adapter(base, lora_config(spec.hyperparameters), spec_path, spec.hyperparameters)


RECIPE = Recipe(
    method="lora",
    data_form="chat",
    load_data=load_chat_datasets,
    build_model=build_model,
    objective=lambda spec, model, data: ChatObjective(data.collate),
    weights=AdapterWeights(),
)
