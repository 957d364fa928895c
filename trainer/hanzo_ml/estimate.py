"""The tokens a train job will train on, counted before it starts (the cost estimate of a dry run).

    python -m hanzo_ml estimate-tokens --spec train.json --output estimate.json

Exact by construction, not by a second implementation: the spec's recipe loads and encodes the data as training
does (its tokenizer and chat template, truncation, prompt masking, packing), the example order is the training
loop's own ExampleOrder from the spec's seed, and each micro-batch is collated and counted with batch_tokens, the
function the loop adds to TrainResult.totals.tokens. No model is loaded, so it needs no GPU.
"""
from __future__ import annotations

import logging
from pathlib import Path

from hanzo_ml.files import atomic_write_json
from hanzo_ml.lora import ExampleOrder, load_datasets
from hanzo_ml.recipes import recipe_for
from hanzo_ml.recipes.components import batch_tokens

log = logging.getLogger(__name__)


def estimate_tokens(spec, spec_path: Path, output_path: Path) -> dict:
    hp = spec.hyperparameters
    data = load_datasets(spec, spec_path, recipe_for(spec.method))
    order = ExampleOrder(len(data.train), hp.seed)
    tokens = 0
    for _ in range(hp.max_steps):
        for _ in range(hp.gradient_accumulation_steps):
            # Padding is not counted, so collating a whole micro-batch counts what its shards on each rank do.
            tokens += batch_tokens(data.collate([data.train[i] for i in order.take(hp.batch_size)]))
    items = len(data.train)
    report = {"tokens": tokens, "steps": hp.max_steps, "train_items": items,
              "epochs": (order.epoch * items + order.index) / items if items else 0.0}
    log.info("%d steps over %d items: %d tokens (%.2f epochs)", hp.max_steps, items, tokens, report["epochs"])
    atomic_write_json(output_path, report)
    return report
