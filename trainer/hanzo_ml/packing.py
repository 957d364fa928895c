"""Sequence packing: several short chat examples share one row of max_seq_length tokens, so a batch carries
almost no padding.

Attention stays inside each example: a packed row gets position ids that restart at 0 for every example and the
index of the example each token belongs to (segment_ids), from which the step builds the mask its attention takes
(hanzo_ml.kernels.model_inputs: a dense block-diagonal causal mask for SDPA, a block mask for FlexAttention).
So the logits of a packed example equal those of the same example alone (tests/test_data.py checks it), and the
first token of an example is never a target predicted from the previous example's last token.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from hanzo_ml.chat import IGNORE_INDEX, TokenizedExample


@dataclass(frozen=True)
class PackedRow:
    examples: tuple[TokenizedExample, ...]

    @property
    def length(self) -> int:
        return sum(len(e.input_ids) for e in self.examples)


def pack(examples: list[TokenizedExample], max_seq_length: int) -> list[PackedRow]:
    """Greedy packing in dataset order: an example goes into the current row while it fits, else opens a new one.
    Deterministic (the sampler shuffles rows, not examples); every example is already <= max_seq_length."""
    rows: list[list[TokenizedExample]] = []
    used = max_seq_length + 1
    for example in examples:
        if used + len(example.input_ids) > max_seq_length:
            rows.append([])
            used = 0
        rows[-1].append(example)
        used += len(example.input_ids)
    return [PackedRow(tuple(row)) for row in rows]


def collate_packed(rows: list[PackedRow], pad_id: int) -> dict[str, torch.Tensor]:
    """input_ids, labels, position_ids: (B, T); attention_mask: (B, T) padding mask (token counts);
    segment_ids: (B, T) the example each token belongs to, -1 for padding (the attention mask is built from it
    on the device, in the form the model's attention takes)."""
    longest = max(row.length for row in rows)
    input_ids = torch.full((len(rows), longest), pad_id, dtype=torch.long)         # (B, T)
    labels = torch.full((len(rows), longest), IGNORE_INDEX, dtype=torch.long)       # (B, T)
    position_ids = torch.zeros((len(rows), longest), dtype=torch.long)              # (B, T)
    segment = torch.full((len(rows), longest), -1, dtype=torch.long)                # (B, T): example index, -1 pad
    for r, row in enumerate(rows):
        start = 0
        for s, example in enumerate(row.examples):
            n = len(example.input_ids)
            input_ids[r, start:start + n] = torch.tensor(example.input_ids)
            labels[r, start:start + n] = torch.tensor(example.labels)
            labels[r, start] = IGNORE_INDEX  # nothing before it in its own example predicts the first token
            position_ids[r, start:start + n] = torch.arange(n)
            segment[r, start:start + n] = s
            start += n
    return {"input_ids": input_ids, "labels": labels, "position_ids": position_ids,
            "attention_mask": (segment >= 0).long(), "segment_ids": segment}
