"""Trainer recipes benchmark: a short run of every recipe template in recipes/tiny/ on the bundled base model,
recording correctness (the loss falls) and throughput (tokens/s), into bench/results/trainer.{json,md}.

    $(jq -r .python .bootstrap.json) bench/trainer/run.py [--steps 30] [--threads 2]

The chat recipes train on the demo task (examples/data/demo-task.jsonl); the preference recipes on pairs built
from it (chosen: the right team, rejected: another team). GPU rows are listed with the reason they are empty
when this machine has no GPU.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "trainer"))

METHODS = ("full", "lora", "qlora", "adalora", "dpo", "orpo")


def demo_splits(work: Path) -> dict[str, dict[str, Path]]:
    records = [json.loads(line) for line in (REPO / "examples/data/demo-task.jsonl").read_text().splitlines()
               if line.strip()]
    random.Random(0).shuffle(records)
    train, validation = records[:400], records[400:424]
    teams = sorted({r["messages"][-1]["content"] for r in records})

    def pairs(chunk: list[dict]) -> list[dict]:
        out = []
        for i, r in enumerate(chunk):
            right = r["messages"][-1]["content"]
            wrong = [t for t in teams if t != right][i % (len(teams) - 1)]
            out.append({"prompt": r["messages"][:-1], "chosen": right, "rejected": wrong})
        return out

    def write(name: str, rows: list[dict]) -> Path:
        path = work / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        return path

    return {"chat": {"train": write("train.jsonl", train), "validation": write("validation.jsonl", validation)},
            "preference": {"train": write("pairs-train.jsonl", pairs(train)),
                           "validation": write("pairs-validation.jsonl", pairs(validation))}}


def run_recipe(method: str, base: Path, data: dict, work: Path, steps: int, threads: int) -> dict:
    from hanzo_ml.lora import train
    from hanzo_ml.recipes import recipe_for
    from hanzo_ml.recipes.templates import read_template, render, validated

    template_path = REPO / "recipes" / "tiny" / f"{method}.yaml"
    files = data[recipe_for(method).data_form]
    document = render(read_template(template_path), str(base), str(files["train"]), str(files["validation"]),
                      str(work / method))
    document["hyperparameters"]["max_steps"] = steps
    document["hyperparameters"]["warmup_steps"] = min(document["hyperparameters"].get("warmup_steps", 0), steps // 5)
    if "adalora" in document:  # the budget schedule shrinks with the run: warmup 10%, fixed final budget 20%
        document["adalora"].update(tinit=steps // 10, tfinal=steps // 5, delta_t=max(1, steps // 10))
    document["checkpoint"] = {"every_steps": steps, "keep_last": 1}  # evaluated and saved at the end only
    document["threads"] = threads
    spec = validated(document, template_path)
    before = eval_loss_before_training(spec, template_path)
    started = time.monotonic()
    result = train(spec, template_path, work / method / "work")
    wall = time.monotonic() - started
    last = json.loads((work / method / "checkpoints" / f"step-{steps:08d}" / "trainer_state.json").read_text())
    return {
        "method": method, "device": "cpu", "steps": steps,
        "batch": spec.hyperparameters.batch_size * spec.hyperparameters.gradient_accumulation_steps,
        "eval_loss_before": round(before, 4),
        "eval_loss_after": round(last["metrics"]["eval/loss"], 4),
        "train_loss_last": round(last["metrics"]["train/loss"], 4),
        "loss_falls": last["metrics"]["eval/loss"] < before,
        "tokens": last["tokens_seen"],
        "tokens_per_second": round(last["tokens_seen"] / last["elapsed_seconds"], 1),
        "wall_seconds": round(wall, 1),
        "output": "model" if result["model_path"] else "adapter",
    }


def eval_loss_before_training(spec, spec_path: Path) -> float:
    """The recipe's own eval loss on the untouched model (adapters start as the identity, so this is the base)."""
    import torch

    from hanzo_ml.modeling import configure_torch, seed_everything
    from hanzo_ml.recipes import recipe_for

    recipe = recipe_for(spec.method)
    configure_torch(spec.threads)
    seed_everything(spec.hyperparameters.seed)
    data = recipe.load_data(spec, spec_path)
    model = recipe.build_model(spec, spec_path, torch.device("cpu"))
    return recipe.objective(spec, model, data).evaluate(model, data.validation, spec.hyperparameters.batch_size)


def markdown(report: dict) -> str:
    lines = ["# Trainer recipes", "", f"{report['machine']}; base model `{report['base_model']}`; "
             f"{report['steps']} optimizer steps per recipe (templates in `recipes/tiny/`).", "",
             "Correctness: the eval loss after the run is below the untouched model's. Chat recipes are evaluated on "
             "held-out demo records (token NLL); preference recipes on held-out pairs (their DPO / ORPO loss). "
             "tokens/s: non-padding tokens fed to the model per second of training (evaluation excluded); "
             "load: the machine's 1-minute load average around the run (above the core count, other processes "
             "took most of the CPU and the throughput is that much lower).", "",
             "| method | device | steps | batch | eval loss before -> after | last train loss | loss falls | "
             "tokens/s | wall s | load |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in report["rows"]:
        if r.get("skipped"):
            lines.append(f"| {r['method']} | {r['device']} | | | | | | | | {r['skipped']} |")
            continue
        lines.append(f"| {r['method']} | cpu | {r['steps']} | {r['batch']} | {r['eval_loss_before']} -> "
                     f"{r['eval_loss_after']} | {r['train_loss_last']} | {'yes' if r['loss_falls'] else 'NO'} | "
                     f"{r['tokens_per_second']} | {r['wall_seconds']} | {r['load_average']} |")
    return "\n".join(lines + gpu_markdown(report.get("gpu"))) + "\n"


def gpu_markdown(gpu: dict | None) -> list[str]:
    """The rows of bench/trainer/gpu.py: ours against the plain `Trainer` + peft and the tuned `Trainer`."""
    lines = ["", "## GPU: hanzo-ml trainer vs transformers `Trainer` baselines (`bench/trainer/gpu.py`)", ""]
    if not gpu:
        return lines + ["Not measured: no GPU was available to the machine that ran the benchmark. The rows stay "
                        "empty rather than estimated; `bench/trainer/gpu.py` fills them on a CUDA machine."]
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu_report import gpu_table
    return lines + gpu_table(gpu)


def main() -> None:
    import os
    import tempfile

    from hanzo_ml.cli import configure_logging, quiet_transformers

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[variable] = "1"
    configure_logging()
    quiet_transformers()
    base = Path(json.loads((REPO / ".bootstrap.json").read_text())["base_model"])
    rows = []
    with tempfile.TemporaryDirectory(prefix="hanzo-ml-bench-trainer-") as tmp:
        work = Path(tmp)
        data = demo_splits(work)
        for method in METHODS:
            load_before = os.getloadavg()[0]
            rows.append(run_recipe(method, base, data, work, args.steps, args.threads))
            # Other processes on the machine slow every number here down; the load average says how much.
            rows[-1]["load_average"] = round((load_before + os.getloadavg()[0]) / 2, 1)
            print(json.dumps(rows[-1]), file=sys.stderr)
    report = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, "
                         f"{args.threads} training threads",
              "base_model": base.name, "steps": args.steps, "rows": rows}
    results = REPO / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    earlier = results / "trainer.json"
    if earlier.is_file() and "gpu" in json.loads(earlier.read_text()):  # bench/trainer/gpu.py's rows stay
        report["gpu"] = json.loads(earlier.read_text())["gpu"]
    (results / "trainer.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (results / "trainer.md").write_text(markdown(report), encoding="utf-8")


if __name__ == "__main__":
    main()
