"""Torch pieces shared by train, eval and merge: determinism, model loading, batching, token losses."""
from __future__ import annotations

import logging
import random
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from hanzo_ml.chat import IGNORE_INDEX, TokenizedExample
from hanzo_ml.errors import InputError

log = logging.getLogger(__name__)


def configure_torch(threads: int) -> None:
    """Same threads + deterministic kernels = bit-identical results on CPU for the same seed."""
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    # Deterministic mode also fills every new tensor with NaN, a debugging aid that changes no result (a correct
    # kernel never reads what it has not written) and costs a kernel per allocation: thousands a step on a GPU.
    torch.utils.deterministic.fill_uninitialized_memory = False


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def load_causal_lm(model_dir: Path, dtype: torch.dtype = torch.float32):
    """A causal LM from a local directory (safetensors), in eval mode; float32 unless told otherwise."""
    from transformers import AutoModelForCausalLM

    if not (Path(model_dir) / "config.json").is_file():
        raise InputError(f"{model_dir}: no config.json (not a model directory)")
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype, local_files_only=True)
    model.eval()
    return model


def collate(examples: list[TokenizedExample], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a micro-batch to its longest example. Padding is masked out of attention and of the loss."""
    longest = max(len(e.input_ids) for e in examples)
    input_ids = torch.full((len(examples), longest), pad_id, dtype=torch.long)          # (B, T)
    labels = torch.full((len(examples), longest), IGNORE_INDEX, dtype=torch.long)        # (B, T)
    attention_mask = torch.zeros((len(examples), longest), dtype=torch.long)             # (B, T)
    for row, example in enumerate(examples):
        n = len(example.input_ids)
        input_ids[row, :n] = torch.tensor(example.input_ids)
        labels[row, :n] = torch.tensor(example.labels)
        attention_mask[row, :n] = 1
    return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask}


def target_token_count(batch: dict[str, torch.Tensor]) -> int:
    """Tokens that carry loss: labelled tokens that have a previous position to predict them from."""
    return int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())


def summed_token_nll(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Sum (not mean) of the next-token NLL over labelled tokens, so micro-batches of different sizes add up to
    an exact token-weighted mean when divided by the step's total target_token_count."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                   use_cache=False).logits  # (B, T, V); no KV cache: nothing is generated
    logits = logits[:, :-1, :].float()                # (B, T-1, V): position t predicts token t+1
    targets = batch["labels"][:, 1:]                  # (B, T-1)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1),
                           ignore_index=IGNORE_INDEX, reduction="sum")


@torch.no_grad()
def mean_token_nll(model, examples: list[TokenizedExample], pad_id: int, batch_size: int = 16) -> tuple[float, int]:
    """(mean NLL per target token, number of target tokens) over a dataset, in eval mode."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(examples), batch_size):
        batch = collate(examples[start:start + batch_size], pad_id)
        total += summed_token_nll(model, batch).item()
        count += target_token_count(batch)
    model.train(was_training)
    return (total / count if count else float("nan")), count


def rng_states() -> dict:
    """Every random generator a training step may draw from (LoRA dropout draws from torch's)."""
    numpy_state = np.random.get_state(legacy=False)
    return {
        "python": random.getstate(),
        "numpy": {"key": torch.from_numpy(numpy_state["state"]["key"].astype(np.int64)),
                  "pos": numpy_state["state"]["pos"], "has_gauss": numpy_state["has_gauss"],
                  "gauss": numpy_state["gauss"]},
        "torch": torch.get_rng_state(),
    }


def set_rng_states(states: dict) -> None:
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    numpy_state = states["numpy"]
    np.random.set_state({"bit_generator": "MT19937",
                         "state": {"key": numpy_state["key"].numpy().astype(np.uint32), "pos": numpy_state["pos"]},
                         "has_gauss": numpy_state["has_gauss"], "gauss": numpy_state["gauss"]})
    torch.set_rng_state(states["torch"])
