"""ORPO: Odds-Ratio Preference Optimization. No reference model: the loss is the chosen answer's NLL minus
beta x log sigmoid(log odds(chosen) - log odds(rejected)), trained here into LoRA adapters.

The loss is trl's (ORPOTrainer.get_batch_loss_metrics). ORPO lives in trl.experimental, which makes no stability
promise; requirements.lock pins trl exactly and nothing outside this module touches it.
"""
from __future__ import annotations

from typing import Iterator

import torch

from hanzo_ml.preference import completion_labels
from hanzo_ml.recipes import Recipe
from hanzo_ml.recipes.components import (AdapterWeights, TrlLossModule, load_preference_datasets, mean_pair_loss,
                                         model_device, preference_settings, to_device)
from hanzo_ml.recipes.lora import build_model  # the same LoRA adapter on the base; the loss differs

def collate_pairs(pairs: list, pad_id: int) -> dict[str, torch.Tensor]:
    """trl's padding collator over the features ORPO reads: prompt + answer ids with -100 labels on the prompt,
    chosen_* and rejected_* each (B, T_answer), prompt_* (B, T_prompt)."""
    from trl.experimental.utils import DPODataCollatorWithPadding

    features = []
    for p in pairs:
        feature = {"prompt_input_ids": p.prompt_ids, "prompt_attention_mask": [1] * len(p.prompt_ids)}
        for name, answer in (("chosen", p.chosen_ids), ("rejected", p.rejected_ids)):
            ids = p.prompt_ids + answer
            feature.update({f"{name}_input_ids": ids, f"{name}_attention_mask": [1] * len(ids),
                            f"{name}_labels": completion_labels(p.prompt_ids, answer)})
        features.append(feature)
    return DPODataCollatorWithPadding(pad_token_id=pad_id)(features)


class OrpoObjective(TrlLossModule):
    def __init__(self, spec, model, data):
        from trl.experimental.orpo import ORPOConfig, ORPOTrainer

        super().__init__()
        args = ORPOConfig(output_dir=self.scratch_dir, beta=preference_settings(spec).beta, seed=spec.hyperparameters.seed,
                          use_cpu=model_device(model).type == "cpu", report_to=[], logging_strategy="no",
                          save_strategy="no", max_length=spec.hyperparameters.max_seq_length,
                          remove_unused_columns=False)  # its padding collator needs every column
        self.trainer = ORPOTrainer(model=model, args=args, train_dataset=self.seed_dataset(data),
                                   processing_class=data.tokenizer)
        self.collate = data.collate

    def micro_batch_losses(self, model, micro_batches: list[dict]) -> Iterator[torch.Tensor]:
        device = model_device(model)
        for batch in micro_batches:
            loss, metrics = self.trainer.get_batch_loss_metrics(model, to_device(batch, device))
            self.collect({k: metrics[k] for k in ("rewards/accuracies", "rewards/margins", "nll_loss",
                                                  "log_odds_ratio")})
            yield loss / len(micro_batches)

    def evaluate(self, model, pairs: list, batch_size: int) -> float:
        return mean_pair_loss(model, pairs, batch_size, self.collate,
                              lambda batch: self.trainer.get_batch_loss_metrics(model, batch, "eval")[0])


RECIPE = Recipe(
    method="orpo",
    data_form="preference",
    load_data=lambda spec, spec_path: load_preference_datasets(spec, spec_path, collate_pairs),
    build_model=build_model,
    objective=OrpoObjective,
    weights=AdapterWeights(),
)
