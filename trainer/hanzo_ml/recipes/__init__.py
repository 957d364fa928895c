"""Fine-tuning recipes behind one interface: one readable module per method, composed of small components.

    full.py     every weight trained (AdamW), checkpoints hold the whole model
    lora.py     LoRA adapters (peft) over the frozen base
    qlora.py    LoRA over a 4-bit NF4 base with double quantization (bitsandbytes)
    adalora.py  AdaLoRA: adapters whose rank budget is reallocated during training (peft)
    dpo.py      Direct Preference Optimization on preference pairs, trl's DPO loss, LoRA adapters
    orpo.py     Odds-Ratio Preference Optimization, trl's ORPO loss (trl.experimental), LoRA adapters

The training loop (hanzo_ml/lora.py) is the same for all of them: it asks the recipe for the data, the model,
the objective (losses per micro-batch, evaluation) and how weights go to disk, and nothing else.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

METHODS = ("full", "lora", "qlora", "adalora", "dpo", "orpo")


def _no_hook(model, step: int) -> None:
    return None


def _no_check(spec, spec_path: Path) -> None:
    return None


@dataclass(frozen=True)
class Recipe:
    method: str
    data_form: str                                        # "chat" or "preference": what train_path holds
    load_data: Callable                                   # (spec, spec_path) -> Datasets
    build_model: Callable                                 # (spec, spec_path, device) -> model in train mode
    objective: Callable                                   # (spec, model, data) -> objective
    weights: object                                       # AdapterWeights() or FullWeights()
    check: Callable = field(default=_no_check)            # (spec, spec_path): refuse what this machine cannot run
    after_optimizer_step: Callable = field(default=_no_hook)  # (model, step): e.g. AdaLoRA's budget update
    save_extra: Callable = field(default=lambda model, directory: None)  # recipe state beyond the weights
    load_extra: Callable = field(default=lambda model, directory: None)


def recipe_for(method: str) -> Recipe:
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
    return importlib.import_module(f"hanzo_ml.recipes.{method}").RECIPE
