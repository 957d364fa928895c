"""Full fine-tuning: every weight of the base is trained; checkpoints and the output hold the whole model.

Memory is weights + gradients + two AdamW moments (about 4x the weights in float32, spec 000 "3-4x model size"),
which hanzo_ml/memory.py checks before the model loads.
"""
from __future__ import annotations

from pathlib import Path

from hanzo_ml.modeling import load_causal_lm
from hanzo_ml.recipes import Recipe
from hanzo_ml.recipes.components import ChatObjective, FullWeights, enable_checkpointing, load_chat_datasets


def build_model(spec, spec_path: Path, device):
    model = load_causal_lm(Path(spec.base_model_path)).to(device)
    for parameter in model.parameters():
        parameter.requires_grad_(True)
    enable_checkpointing(model, spec.hyperparameters)
    model.train()
    return model


RECIPE = Recipe(
    method="full",
    data_form="chat",
    load_data=load_chat_datasets,
    build_model=build_model,
    objective=lambda spec, model, data: ChatObjective(data.collate),
    weights=FullWeights(),
)
