"""Evaluation throughput, Candle vs PyTorch, on the same merged model and the same token ids.

    PYTHONPATH=trainer python bench/eval/candle_vs_pytorch.py --merged DIR --tokens general-tokens.json \
        --candle PATH --out bench/results/eval-candle-vs-pytorch

Both score every sequence alone (no batching, no padding), the definition validation uses. PyTorch: the
trainer's sequence_nlls in one process after the model is loaded. Candle: `validate --general-tokens` minus a
run of the same command without it, so model loading and the prompt check cancel out. Best of --repeats.
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from pathlib import Path

import torch

from hanzo_ml.merge import sequence_nlls
from hanzo_ml.modeling import configure_torch, load_causal_lm


def candle_seconds(candle: str, merged: Path, tokens: Path | None) -> float:
    args = [candle, "validate", "--model", str(merged), "--json"]
    if tokens:
        args += ["--general-tokens", str(tokens)]
    start = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--merged", type=Path, required=True)
    p.add_argument("--tokens", type=Path, required=True)
    p.add_argument("--candle", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    sequences = json.loads(a.tokens.read_text())["sequences"]
    tokens = sum(len(s) - 1 for s in sequences)
    configure_torch(a.threads)
    model = load_causal_lm(a.merged)
    sequence_nlls(model, sequences[:2])  # warm-up
    pytorch = min(timed(lambda: sequence_nlls(model, sequences)) for _ in range(a.repeats))
    candle = min(candle_seconds(a.candle, a.merged, a.tokens) - candle_seconds(a.candle, a.merged, None)
                 for _ in range(a.repeats))
    result = {
        "sequences": len(sequences), "scored_tokens": tokens,
        "pytorch": {"seconds": pytorch, "tokens_per_s": tokens / pytorch, "torch": torch.__version__,
                    "threads": a.threads},
        "candle": {"seconds": candle, "tokens_per_s": tokens / candle},
        "candle_speedup": pytorch / candle,
        "machine": {"cpu": platform.processor() or platform.machine(), "note": "2 shared CPU cores, other work running"},
    }
    a.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    a.out.with_suffix(".md").write_text(
        "# Eval throughput: Candle vs PyTorch (tiny model, CPU)\n\n"
        f"Same merged model, same {len(sequences)} general-text sequences ({tokens} scored tokens), each sequence "
        "scored alone, best of " f"{a.repeats}.\n\n| engine | seconds | tokens/s |\n| --- | --- | --- |\n"
        f"| PyTorch {torch.__version__} ({a.threads} threads) | {pytorch:.3f} | {tokens / pytorch:.0f} |\n"
        f"| Candle | {candle:.3f} | {tokens / candle:.0f} |\n\n"
        f"Candle / PyTorch throughput: {pytorch / candle:.2f}x. Measured on 2 CPU cores shared with other work: "
        "compare the ratio, not the absolute numbers.\n")
    print(json.dumps(result))


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
