"""The trainer's half of the product demo, end to end, with the wall time of every step.

    PYTHONPATH=trainer python trainer/scripts/run_demo.py --workdir /tmp/hanzo-demo [--base DIR]

1. build-base (skipped when --base points at a built model)
2. the control plane's preprocessing, in miniature: drop exact duplicate records, split 80/10/10 (seeded)
3. count-tokens, train (LoRA), eval (base vs tuned, test split and instruction set), merge (reference perplexity)
Every job spec it writes sits in <workdir>/specs/, and <workdir>/summary.json holds the numbers.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

TRAINER_DIR = Path(__file__).resolve().parents[1]
DEMO_TASK = TRAINER_DIR.parent / "examples" / "data" / "demo-task.jsonl"
INSTRUCTIONS = TRAINER_DIR.parent / "examples" / "heldout" / "instructions.jsonl"

DEMO_HYPERPARAMETERS = {
    "learning_rate": 2e-3,     # high for LoRA, right for a 4.5M-parameter model; 3e-3 spikes and stalls
    "max_steps": 250,          # ~2 epochs of the 80% split at batch 8; routing is learned by ~200
    "batch_size": 8,
    "gradient_accumulation_steps": 1,
    "warmup_steps": 20,
    "weight_decay": 0.0,
    "max_grad_norm": 1.0,
    "lora_rank": 16,
    "lora_alpha": 32,
    "lora_dropout": 0.0,
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "max_seq_length": 128,     # the longest rendered example is well under this
    "seed": 42,
}


def main() -> int:
    args = parse_args()
    workdir = args.workdir.resolve()
    (workdir / "specs").mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    base = args.base.resolve() if args.base else workdir / "base"
    if not (base / "base-model.json").is_file():
        timings["build-base"] = run(["build-base", "--out", str(base), "--seed", "0"])
    splits = split_demo_task(workdir / "data", seed=args.seed)

    timings["count-tokens"] = run_job(workdir, {
        "kind": "count-tokens", "job_name": "demo-count", "tokenizer_path": str(base),
        "inputs": {name: str(path) for name, path in splits.items()}, "output_path": str(workdir / "counts.json")})
    timings["train"] = run_job(workdir, {
        "kind": "train", "job_name": "demo-lora", "run_id": "00000000000000000000000000demo01",
        "tracking_uri": None, "base_model_path": str(base), "train_path": str(splits["train"]),
        "validation_path": str(splits["validation"]), "output_dir": str(workdir / "output"),
        "checkpoint_dir": str(workdir / "checkpoints"), "method": "lora", "hyperparameters": DEMO_HYPERPARAMETERS,
        "checkpoint": {"every_steps": 50, "keep_last": 2}, "threads": args.threads}, "--workdir", str(workdir))
    adapter = workdir / "output" / "adapter"
    timings["eval"] = run_job(workdir, {
        "kind": "eval", "job_name": "demo-eval", "base_model_path": str(base), "adapter_path": str(adapter),
        "test_path": str(splits["test"]), "output_path": str(workdir / "eval-report.json"),
        "instructions_path": str(INSTRUCTIONS), "scores_path": str(workdir / "eval-scores.json"),
        "max_new_tokens": 8, "max_seq_length": 128, "threads": args.threads})
    timings["merge"] = run_job(workdir, {
        "kind": "merge", "job_name": "demo-merge", "base_model_path": str(base), "adapter_path": str(adapter),
        "output_dir": str(workdir / "merged" / "model"), "heldout_path": str(splits["test"]),
        "reference_path": str(workdir / "merge-report.json"), "max_seq_length": 128, "max_sequences": 64,
        "threads": args.threads})

    report = json.loads((workdir / "eval-report.json").read_text())
    summary = {
        "seconds": timings,
        "records": {name: sum(1 for _ in open(path)) for name, path in splits.items()},
        "base": report["base"], "tuned": report["tuned"],
        "train": json.loads((workdir / "result.json").read_text()),
        "merge": {k: v for k, v in json.loads((workdir / "merge-report.json").read_text()).items() if k != "files"},
    }
    (workdir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--base", type=Path, help="an already built base model directory")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="seed of the train/validation/test split")
    return parser.parse_args()


def split_demo_task(out_dir: Path, seed: int) -> dict[str, Path]:
    """Exact duplicates dropped (first occurrence kept), then a seeded 80/10/10 split."""
    lines = list(dict.fromkeys(line for line in DEMO_TASK.read_text().splitlines() if line.strip()))
    random.Random(seed).shuffle(lines)
    n_train, n_validation = int(0.8 * len(lines)), int(0.1 * len(lines))
    parts = {"train": lines[:n_train], "validation": lines[n_train:n_train + n_validation],
             "test": lines[n_train + n_validation:]}
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, part in parts.items():
        paths[name] = out_dir / f"{name}.jsonl"
        paths[name].write_text("".join(line + "\n" for line in part))
    return paths


def run_job(workdir: Path, spec: dict, *extra: str) -> float:
    path = workdir / "specs" / f"{spec['kind']}.json"
    path.write_text(json.dumps(spec, indent=2) + "\n")
    return run([spec["kind"], "--spec", str(path), *extra])


def run(args: list[str]) -> float:
    """One `python -m hanzo_ml` command; its log passes through to stderr. Returns the wall time."""
    print(f"$ python -m hanzo_ml {' '.join(args)}", file=sys.stderr, flush=True)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "hanzo_ml", *args], check=True, cwd=TRAINER_DIR,
                   env={**os.environ, "PYTHONPATH": str(TRAINER_DIR)})
    seconds = round(time.monotonic() - started, 1)
    print(f"  {args[0]}: {seconds} s", file=sys.stderr, flush=True)
    return seconds


if __name__ == "__main__":
    raise SystemExit(main())
