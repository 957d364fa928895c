"""DPO: Direct Preference Optimization on `prompt` / `chosen` / `rejected` pairs, with LoRA adapters.

The loss is trl's (DPOTrainer, loss_type sigmoid | hinge | ipo, strength beta). With a fresh adapter the
reference policy is the frozen base itself: trl disables the adapter for the reference forward, so no second
copy of the model is held in memory.
"""
from __future__ import annotations

from typing import Iterator

import torch

from hanzo_ml.recipes import Recipe
from hanzo_ml.recipes.components import (AdapterWeights, TrlLossModule, load_preference_datasets, mean_pair_loss,
                                         model_device, preference_settings, to_device)
from hanzo_ml.recipes.lora import build_model  # the same LoRA adapter on the base; the loss differs

def collate_pairs(pairs: list, pad_id: int) -> dict[str, torch.Tensor]:
    """trl's preference collator: rows [chosen_0..chosen_B-1, rejected_0..rejected_B-1], each prompt + answer,
    with completion_mask marking the answer tokens. input_ids/attention_mask/completion_mask: (2B, T)."""
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    return DataCollatorForPreference(pad_token_id=pad_id)(
        [{"prompt_ids": p.prompt_ids, "chosen_ids": p.chosen_ids, "rejected_ids": p.rejected_ids} for p in pairs])


class DpoObjective(TrlLossModule):
    def __init__(self, spec, model, data):
        from trl import DPOConfig, DPOTrainer

        super().__init__()
        p = preference_settings(spec)
        args = DPOConfig(output_dir=self.scratch_dir, beta=p.beta, loss_type=[p.loss_type],
                         seed=spec.hyperparameters.seed, use_cpu=model_device(model).type == "cpu", report_to=[],
                         logging_strategy="no", save_strategy="no", max_length=None)
        self.trainer = DPOTrainer(model=model, args=args, train_dataset=self.seed_dataset(data),
                                  processing_class=data.tokenizer)
        self.collate = data.collate

    def micro_batch_losses(self, model, micro_batches: list[dict]) -> Iterator[torch.Tensor]:
        device = model_device(model)
        for batch in micro_batches:
            yield self.trainer.compute_loss(model, to_device(batch, device)) / len(micro_batches)
        self.collect({k: v[-1] for k, v in self.trainer._metrics["train"].items()
                      if k in ("rewards/accuracies", "rewards/margins") and v})
        self.trainer._metrics["train"].clear()

    def evaluate(self, model, pairs: list, batch_size: int) -> float:
        loss = mean_pair_loss(model, pairs, batch_size, self.collate, lambda batch: self.trainer.compute_loss(model, batch))
        self.trainer._metrics["eval"].clear()
        return loss


RECIPE = Recipe(
    method="dpo",
    data_form="preference",
    load_data=lambda spec, spec_path: load_preference_datasets(spec, spec_path, collate_pairs),
    build_model=build_model,
    objective=DpoObjective,
    weights=AdapterWeights(),
)
