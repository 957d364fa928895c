"""GPU trainer benchmark: our trainer against two transformers `Trainer` baselines, same data and settings, on a
~1.1B-parameter Llama-architecture model made from a config (TinyLlama-1.1B's shape, seeded random weights, the
bundled tokenizer; nothing is downloaded). For full fine-tuning (bf16 mixed precision), LoRA and QLoRA it records
tokens/s, MFU, peak GPU memory and the first (warm-up) step's seconds, and writes them as the GPU rows of
bench/results/trainer.{json,md} (the CPU rows come from bench/trainer/run.py and are kept).

    $(jq -r .python .bootstrap.json) bench/trainer/gpu.py [--steps 40] [--seq-len 1024] [--rows 8] [--out DIR]
    $(jq -r .python .bootstrap.json) bench/trainer/gpu.py --smoke   # a tiny model on CPU: checks the harness

Systems (--systems): hanzo-ml (ours), baseline (`Trainer` + peft, padded batches) and rival (`Trainer` +
padding-free packing + Liger + FlexAttention); bench/trainer/baselines.py says how each baseline is configured.
Without --systems, hanzo-ml-compile (ours with hardware.compile) runs for full fine-tuning too. A compiled run
fails rather than report eager numbers when dynamo would give up on a layer (its recompile limit), and its row
notes how many graphs dynamo compiled (one per kind of call, however deep the model).
Ours trains full fine-tuning on bf16 weights with float32 masters (hardware.weights auto); hanzo-ml-fp32-weights,
run only when named (--systems or --only hanzo-ml-fp32-weights:full), is ours on float32 weights under autocast,
the way the baselines hold them.
All see the same records of examples/data/demo-task.jsonl, tokenized by our chat encoder (loss on the answers
only), the same learning rate, warmup and step count, and about the same tokens per optimizer step: ours packs
examples into --rows rows of --seq-len tokens (attention kept within each example); the baselines take as many
examples per step as fill the same tokens. tokens/s counts non-padding tokens over the steps after the first --skip
(warm-up) steps; MFU is 6 x parameters x tokens/s over the device's peak dense bf16 FLOP/s (--peak-tflops); peak
memory is torch.cuda.max_memory_allocated.

Each (system, method) run is its own process, so one run's memory never counts for another, under --run-timeout
seconds: a run that fails or times out becomes a row with the end of its log as "error", the report is written
after every run, and the bench exits non-zero at the end if any run (or the reference check) failed. Before the
runs, bench/trainer/gpu_check.py, where present, checks the trainer's GPU kernels against the reference path on
the same model; its result is recorded under "reference_check".
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "trainer"))
sys.path.insert(0, str(HERE))

from baselines import LEARNING_RATE, TARGETS, measured, print_profile, run_trainer, step_profiler  # noqa: E402
from gpu_report import OURS  # noqa: E402

METHODS = ("full", "lora", "qlora")
SYSTEMS = {"hanzo-ml": "hanzo-ml", "hanzo-ml-compile": "hanzo-ml, compiled layers (hardware.compile)",
           "hanzo-ml-fp32-weights": "hanzo-ml, float32 weights under autocast (hardware.weights fp32)",
           "baseline": "transformers Trainer + peft", "rival": "Trainer + padding-free + Liger + FlexAttention"}
DEFAULT_SYSTEMS = ("hanzo-ml", "baseline", "rival")
FULL_ONLY = ("hanzo-ml-fp32-weights",)  # hardware.weights changes nothing for adapter methods
DEFAULT_EXTRA = (("hanzo-ml-compile", "full"),)  # without --systems: the compiled-layers row the MFU target is about
VERSIONS = ("torch", "transformers", "peft", "accelerate", "bitsandbytes", "liger-kernel", "triton")
ERROR_LINES = 25  # the end of a failed run's log kept in its row
# TinyLlama-1.1B's shape; the smoke shape only checks that every part runs, with more layers than dynamo's
# recompile limit (8) so that the compiled run would fail there if a layer compiled to a graph of its own.
SHAPES = {
    "1.1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                 num_key_value_heads=4, vocab_size=32000),
    "smoke": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=10, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=None),
}


# ---- the model and the data ------------------------------------------------------------------------------

def default_tokenizer() -> Path:
    """The bundled tiny base model's directory (its tokenizer and token ids), as the bootstrap recorded it."""
    bootstrap = REPO / ".bootstrap.json"
    if not bootstrap.is_file():
        sys.exit("bench/trainer/gpu.py: no .bootstrap.json: pass --tokenizer DIR (tokenizer.json, "
                 "tokenizer_config.json, chat_template.jinja and config.json of the bundled base model)")
    return Path(json.loads(bootstrap.read_text())["base_model"])


def make_model(out: Path, shape: str, tokenizer: Path) -> Path:
    """A Llama model from a config with seeded random weights (bf16 on disk), beside the bundled tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (tokenizer / name).is_file():
            shutil.copy(tokenizer / name, out / name)
    dims = dict(SHAPES[shape])
    tiny_config = json.loads((tokenizer / "config.json").read_text())  # vocab size and special token ids only
    dims["vocab_size"] = dims["vocab_size"] or tiny_config["vocab_size"]
    config = LlamaConfig(**dims, max_position_embeddings=4096, tie_word_embeddings=False,
                         bos_token_id=tiny_config.get("bos_token_id"), eos_token_id=tiny_config.get("eos_token_id"),
                         pad_token_id=tiny_config.get("pad_token_id"))
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    return out


def write_splits(work: Path) -> dict[str, Path]:
    lines = [line for line in (REPO / "examples/data/demo-task.jsonl").read_text().splitlines() if line.strip()]
    (work / "train.jsonl").write_text("\n".join(lines[:-64]) + "\n")
    (work / "validation.jsonl").write_text("\n".join(lines[-64:]) + "\n")
    return {"train": work / "train.jsonl", "validation": work / "validation.jsonl"}


def parameter_count(model_dir: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), framework="pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())


# ---- one run of ours -------------------------------------------------------------------------------------

def run_ours(args, model_dir: Path, files: dict[str, Path], work: Path) -> dict:
    from hanzo_ml.lora import train
    from hanzo_ml.recipes.templates import read_template, render, validated

    template = REPO / "recipes" / "tiny" / f"{args.method}.yaml"
    # no validation split: the baselines evaluate nothing either, and the end of the run is not measured
    doc = render(read_template(template), str(model_dir), str(files["train"]), None, str(work))
    hp = doc["hyperparameters"]
    hp.update(max_steps=args.steps, batch_size=args.rows, gradient_accumulation_steps=1, warmup_steps=args.steps // 10,
              max_seq_length=args.seq_len, learning_rate=LEARNING_RATE[args.method])
    if args.method != "full":
        hp.update(lora_rank=16, lora_alpha=32, target_modules=TARGETS)
    doc["data"] = {**doc.get("data", {}), "packing": True}
    doc["hardware"] = {**doc.get("hardware", {}), "device": args.device, "precision": args.precision,
                       "gpus_per_node": 1 if args.device == "cuda" else 0, "device_memory_gb": None,
                       "peak_flops_per_device": args.peak_tflops * 1e12,
                       "compile": args.system == "hanzo-ml-compile",
                       # full fine-tuning: bf16 weights with float32 masters by default (auto), the former way on asking
                       "weights": "fp32" if args.system == "hanzo-ml-fp32-weights" else "auto"}
    if args.method == "qlora":
        doc["quantization"] = {**doc.get("quantization", {}), "compute_dtype": args.compute_dtype}
    doc["checkpoint"] = {"every_steps": args.steps, "keep_last": 1, "keep_best": False}  # saved at the end only
    doc["threads"] = os.cpu_count() if args.device == "cuda" else 2
    spec = validated(doc, template)
    steps = []
    import hanzo_ml.lora as loop
    original = loop.write_progress

    profiler = step_profiler(args)
    compiled = args.system == "hanzo-ml-compile"
    if compiled:
        import torch._dynamo

        # a layer dynamo gives up on runs eager: that would measure something else than compiled layers
        torch._dynamo.config.fail_on_recompile_limit_hit = True

    def record_step(workdir, state, *a, **kw):  # called once per step with the step's metrics
        original(workdir, state, *a, **kw)
        if state.step and (not steps or steps[-1][0] != state.step):
            steps.append((state.step, state.tokens_seen, state.elapsed_seconds))
            if profiler is not None:
                profiler.step()
    loop.write_progress = record_step
    train(spec, template, work / "work")
    print_profile(profiler)
    result = measured(steps, args.skip)
    if compiled:
        result.update(compiled_graphs(model_dir))
    return result


def compiled_graphs(model_dir: Path) -> dict:
    """How many graphs dynamo compiled in the run (the decoder layers', and FlexAttention's where transformers
    compiles it), against the depth, and the note the report shows: a per-layer graph would make them grow."""
    from torch._dynamo.utils import counters

    graphs = int(counters["stats"]["unique_graphs"])
    layers = json.loads((model_dir / "config.json").read_text())["num_hidden_layers"]
    return {"compiled_graphs": graphs, "decoder_layers": layers,
            "note": f"dynamo compiled {graphs} graph{'s' if graphs != 1 else ''} in the run, for {layers} "
                    "decoder layers"}


def child(args) -> None:
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[variable] = "1"
    from hanzo_ml.cli import configure_logging, quiet_transformers
    configure_logging()
    quiet_transformers()
    work = Path(args.work)
    files = {"train": work / "train.jsonl", "validation": work / "validation.jsonl"}
    run_dir = work / f"{args.system}-{args.method}"
    if args.system in OURS:
        result = run_ours(args, work / "model", files, run_dir)
    else:
        result = run_trainer(args, work / "model", files, run_dir, rival=args.system == "rival")
    Path(args.result).write_text(json.dumps(result))


# ---- the driver ------------------------------------------------------------------------------------------

def run_one(args, system: str, method: str, work: Path, device: dict, log: Path) -> dict:
    """One (system, method) run in a child process of its own; a failure or a timeout becomes {"error": ...}."""
    result = work / f"{system}-{method}.json"
    cmd = [sys.executable, __file__, "--system", system, "--method", method, "--work", str(work),
           "--result", str(result), "--device", device["device"], "--precision", device["precision"],
           "--compute-dtype", device["compute"], "--steps", str(args.steps), "--skip", str(args.skip),
           "--seq-len", str(args.seq_len), "--rows", str(args.rows), "--peak-tflops", str(args.peak_tflops)] \
        + (["--profile"] if args.profile else [])
    started = time.monotonic()
    with log.open("w") as stream:
        # its own session: a timeout ends the run with every process it started (compile workers included)
        child_process = subprocess.Popen(cmd, stdout=stream, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = child_process.wait(timeout=args.run_timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child_process.pid, signal.SIGKILL)
            child_process.wait()
            code = None
    wall = round(time.monotonic() - started, 1)
    if code == 0 and result.is_file():
        return {**json.loads(result.read_text()), "wall_seconds": wall}
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-ERROR_LINES:])
    reason = f"timed out after {args.run_timeout} s" if code is None else f"exited with status {code}"
    return {"error": f"{reason}\n{tail}", "wall_seconds": wall}


def reference_check(model_dir: Path, device: str, work: Path, logs: Path) -> dict | None:
    """bench/trainer/gpu_check.py's verdict on the trainer's GPU kernels, where the check exists."""
    script = HERE / "gpu_check.py"
    if not script.is_file():
        return None
    out, log = work / "reference-check.json", logs / "reference-check.log"
    cmd = [sys.executable, str(script), "--model", str(model_dir), "--device", device, "--out", str(out)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired as e:
        stderr = e.stderr or b""
        log.write_text(stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr)
        return {"ok": False, "error": "timed out after 240 s"}
    log.write_text(proc.stdout + proc.stderr)
    found = json.loads(out.read_text()) if out.is_file() else None
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.splitlines()[-ERROR_LINES:])
        return {"ok": False, "error": f"exited with status {proc.returncode}\n{tail}", "result": found}
    return {"ok": True, "result": found}


def environment(device: str) -> dict:
    """The device, its driver and the library versions the numbers were measured with."""
    from importlib import metadata

    import torch

    versions = {}
    for name in VERSIONS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    versions["torch"] = torch.__version__  # with its build (+cu130): the metadata version drops it
    if device != "cuda":
        return {"device": f"cpu ({platform.machine()}, smoke)", "driver": None, "cuda": None, "versions": versions}
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):  # no nvidia-smi: the CUDA version the driver supports
        api = getattr(torch._C, "_cuda_getDriverVersion", lambda: 0)()
        driver = f"supports CUDA {api // 1000}.{api % 1000 // 10}" if api else None
    return {"device": torch.cuda.get_device_name(0), "driver": driver, "cuda": torch.version.cuda,
            "memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1), "versions": versions}


def source_commit(given: str | None) -> str | None:
    if given:
        return given
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--skip", type=int, default=5, help="warm-up steps left out of tokens/s")
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--rows", type=int, default=8, help="packed rows of --seq-len tokens per step (ours)")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak of one device (H100 SXM)")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--systems", help=f"default: {','.join(DEFAULT_SYSTEMS)}, and "
                        f"{', '.join(':'.join(p) for p in DEFAULT_EXTRA)}")
    parser.add_argument("--run-timeout", type=int, default=240, help="seconds one (system, method) run may take")
    parser.add_argument("--only", help="system:method pairs to run instead of --systems x --methods "
                                       "(e.g. hanzo-ml:qlora,hanzo-ml-compile:full)")
    parser.add_argument("--no-check", action="store_true", help="skip bench/trainer/gpu_check.py")
    parser.add_argument("--profile", action="store_true", help="torch.profiler tables in each run's log; the rows "
                        "then include the profiler's overhead, so only --out gets the report")
    parser.add_argument("--tokenizer", type=Path, help="the bundled base model's tokenizer files and config.json "
                                                       "(default: .bootstrap.json's base_model)")
    parser.add_argument("--out", type=Path, help="also copy trainer.json/.md and every run's log here")
    parser.add_argument("--commit", help="the source commit measured (default: git rev-parse HEAD)")
    parser.add_argument("--smoke", action="store_true", help="a tiny model on CPU: checks the harness only")
    # internal: one run in a child process
    parser.add_argument("--system", choices=list(SYSTEMS))
    parser.add_argument("--method", choices=METHODS)
    parser.add_argument("--work")
    parser.add_argument("--result")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--compute-dtype", default="bfloat16")
    args = parser.parse_args()
    default_systems = args.systems is None
    args.systems = args.systems or ",".join(DEFAULT_SYSTEMS)
    for option, chosen, known in (("--methods", args.methods, METHODS), ("--systems", args.systems, SYSTEMS)):
        unknown = [x for x in chosen.split(",") if x not in known]
        if unknown:
            parser.error(f"{option}: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    if args.only:
        pairs = [pair.partition(":") for pair in args.only.split(",")]
        bad = [f"{s}:{m}" for s, _, m in pairs if s not in SYSTEMS or m not in METHODS]
        if bad:
            parser.error(f"--only: unknown system:method {', '.join(bad)}")
        args.pairs = [(s, m) for s, _, m in pairs]
    else:
        args.pairs = [(s, m) for m in args.methods.split(",") for s in args.systems.split(",")
                      if s not in FULL_ONLY or m == "full"]
        if default_systems:
            args.pairs += [(s, m) for s, m in DEFAULT_EXTRA if m in args.methods.split(",")]
    return args


def main() -> None:
    args = parse_args()
    if args.system:
        return child(args)

    import torch

    if not torch.cuda.is_available() and not args.smoke:
        sys.exit("bench/trainer/gpu.py: no CUDA device on this machine (use --smoke to check the harness on CPU)")
    device = (dict(device="cpu", precision="fp32", compute="float32") if args.smoke
              else dict(device="cuda", precision="bf16", compute="bfloat16"))
    if args.smoke:
        args.steps, args.skip, args.seq_len, args.rows = min(args.steps, 4), 1, 256, 2
    tokenizer = args.tokenizer or default_tokenizer()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    failed = []
    with tempfile.TemporaryDirectory(prefix="hanzo-ml-bench-gpu-") as tmp:
        work = Path(tmp)
        logs = args.out or work
        model_dir = make_model(work / "model", "smoke" if args.smoke else "1.1b", tokenizer)
        write_splits(work)
        params = parameter_count(model_dir)
        gpu = {**environment(device["device"]), "commit": source_commit(args.commit), "parameters": params,
               "steps": args.steps, "skip": args.skip, "seq_len": args.seq_len, "rows": args.rows,
               "peak_tflops": args.peak_tflops, "smoke": args.smoke, "profiled": args.profile, "systems": SYSTEMS,
               "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "results": []}
        print(json.dumps({k: v for k, v in gpu.items() if k != "results"}), file=sys.stderr, flush=True)
        gpu["reference_check"] = None if args.no_check else reference_check(model_dir, device["device"], work, logs)
        if gpu["reference_check"] and not gpu["reference_check"]["ok"]:
            failed.append("reference check")
        print(json.dumps({"reference_check": gpu["reference_check"]}), file=sys.stderr, flush=True)
        runs: dict[str, dict] = {}
        for system, method in args.pairs:
            r = run_one(args, system, method, work, device, logs / f"{system}-{method}.log")
            if "error" in r:
                failed.append(f"{system} {method}")
            elif device["device"] == "cuda":
                r["mfu"] = 6 * params * r["tokens_per_second"] / (args.peak_tflops * 1e12)
            runs.setdefault(method, {})[system] = r
            print(json.dumps({"method": method, "system": system, **r}), file=sys.stderr, flush=True)
            gpu["results"] = [gpu_row(m, runs[m]) for m in METHODS if m in runs]
            write_report(gpu, args.out)  # after every run: a later crash keeps the rows so far
    if args.smoke:  # the harness ran; its numbers say nothing about a GPU
        print(json.dumps(gpu, indent=2))
    if failed:
        sys.exit(f"bench/trainer/gpu.py: failed: {', '.join(failed)}")


def gpu_row(method: str, runs: dict) -> dict:
    """One method's runs, with ours against each baseline: tokens/s and peak memory as ratios (ours / theirs)."""
    row = {"method": method, **{system.replace("-", "_"): r for system, r in runs.items()}}
    for our_system, key in OURS.items():
        ours = runs.get(our_system)
        if not ours:
            continue
        row[key] = {}
        for system in ("baseline", "rival"):
            theirs = runs.get(system)
            if not theirs or "error" in ours or "error" in theirs:
                continue
            row[key][system] = {
                "tokens_per_second": ours["tokens_per_second"] / theirs["tokens_per_second"]
                if theirs["tokens_per_second"] else None,
                "peak_memory": ours["peak_memory_gib"] / theirs["peak_memory_gib"]
                if ours["peak_memory_gib"] and theirs["peak_memory_gib"] else None}
    return row


def write_report(gpu: dict, out: Path | None) -> None:
    """The GPU rows into bench/results/trainer.{json,md} (the CPU rows kept); a smoke run writes only to --out."""
    from run import markdown

    path = REPO / "bench" / "results" / "trainer.json"
    report = json.loads(path.read_text()) if path.is_file() else {"rows": []}
    report["gpu"] = gpu
    text, md = json.dumps(report, indent=2) + "\n", markdown(report)
    targets = ([] if gpu["smoke"] or gpu.get("profiled") else [path.parent]) + ([out] if out else [])
    for folder in targets:
        (folder / "trainer.json").write_text(text, encoding="utf-8")
        (folder / "trainer.md").write_text(md, encoding="utf-8")


if __name__ == "__main__":
    main()
