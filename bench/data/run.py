"""Data bench (issue 24, Measure): our preparation chain and datatrove's on the same generated chat records, in one run.

    PYTHONPATH=trainer nice -n 10 <trainer venv python> bench/data/run.py [--records 1000000] [--ours modules|cli]

1. datatrove's venv: ~/.cache/hanzo-ml/datatrove-<hash of bench/data/requirements-datatrove.lock>, made on first use.
2. bench/data/generate.py writes the records with planted exact duplicates, near-duplicates and PII, and their truth.
3. Each side runs as a child process, one after the other; its CPU time (user + system) and peak RSS come from the
   kernel's accounting of that child (os.wait4). Records per hour per core = records / CPU-hours.
   --ours modules: bench/data/ours.py streams the records through hanzo_ml.dataprep.pii and near_dedup (the modules
   the engine calls); --ours cli: `python -m hanzo_ml prepare-dataset --spec` with the same operations (needs
   --tokenizer-path; ids are not kept there, so only counts are compared).
4. Agreement: of the records either side removed as a duplicate, the share both removed; of the records both kept,
   how often both masked (or both left) an email and a public IPv4, the two kinds datatrove's PIIFormatter finds.
5. The MinHash back-ends (bench/data/minhash_backends.py) and PII masking alone (bench/data/pii_speed.py), in CPU
   seconds, on --micro-records records.
Writes bench/results/data.{json,md}.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from generate import generated_input  # noqa: E402  (bench/data/generate.py)

REPO = HERE.parent.parent
LOCK = HERE / "requirements-datatrove.lock"
RESULTS = REPO / "bench" / "results"
# datatrove's PIIFormatter replaces with these (its defaults): a record holds a masked value when one appears.
DT_EMAILS = ("email@example.com", "firstname.lastname@example.org")
DT_IPS = ("22.214.171.124", "126.96.36.199", "188.8.131.52", "184.108.40.206", "220.127.116.11", "18.104.22.168")


def datatrove_python() -> Path:
    venv = Path.home() / ".cache" / "hanzo-ml" / f"datatrove-{hashlib.sha256(LOCK.read_bytes()).hexdigest()[:12]}"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "-r", str(LOCK)], check=True)
    return python


def measured(cmd: list[str], env: dict | None = None) -> dict:
    """Runs cmd as a child at nice 10; its wall time, CPU time and peak RSS from the kernel's accounting."""
    start = time.perf_counter()
    proc = subprocess.Popen(["nice", "-n", "10", *cmd], env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with exit code {os.waitstatus_to_exitcode(status)}")
    return {"wall_s": round(wall, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}


def kept(path: Path) -> dict[int, str]:
    with path.open() as f:
        return {row["id"]: row["text"] for row in map(json.loads, f)}


def pii_agreement(ours: dict[int, str], theirs: dict[int, str]) -> dict:
    """Per kind both sides mask (emails, IPv4), of the records both kept: which each masked and how often they agree."""
    pii = {}
    both = ours.keys() & theirs.keys()
    for kind, marks in (("email", DT_EMAILS), ("ipv4", DT_IPS)):
        ours_found = {i for i in both if f"[REDACTED:{kind}]" in ours[i]}
        theirs_found = {i for i in both if any(m in theirs[i] for m in marks)}
        pii[kind] = {"ours": len(ours_found), "datatrove": len(theirs_found), "both": len(ours_found & theirs_found),
                     "agreement": round(len(ours_found & theirs_found) / max(1, len(ours_found | theirs_found)), 4)}
    return pii


def agreement(records: int, ours: dict[int, str], theirs: dict[int, str], truth: dict) -> dict:
    """Dedup agreement (removed by both / removed by either: both sides' length filter removes the same records)
    and PII agreement on the records both kept."""
    all_ids = set(range(1, records + 1))
    removed_ours, removed_theirs = all_ids - ours.keys(), all_ids - theirs.keys()
    planted = {kind: {p["line"] for p in truth["planted"] if p["planted"] == kind} for kind in ("exact", "near")}
    dedup = {
        "removed_by_ours": len(removed_ours), "removed_by_datatrove": len(removed_theirs),
        "removed_by_both": len(removed_ours & removed_theirs),
        "agreement": round(len(removed_ours & removed_theirs) / max(1, len(removed_ours | removed_theirs)), 4),
        "planted_exact_removed": {"ours": len(planted["exact"] & removed_ours), "datatrove": len(planted["exact"] & removed_theirs), "planted": len(planted["exact"])},
        "planted_near_removed": {"ours": len(planted["near"] & removed_ours), "datatrove": len(planted["near"] & removed_theirs), "planted": len(planted["near"])},
    }
    return {"dedup": dedup, "pii": pii_agreement(ours, theirs)}


def run_ours_cli(args: argparse.Namespace, data: Path, work: Path) -> tuple[dict, dict]:
    """The engine's command with the spec of contracts/data-prep.ts (PrepareDatasetJobSpec)."""
    if not args.tokenizer_path:
        raise SystemExit("--ours cli: give --tokenizer-path (a model directory with tokenizer.json)")
    spec = {
        "kind": "prepare-dataset", "job_name": "bench-data",
        "sources": [{"path": str(data), "format": "jsonl", "display_name": data.name}],
        "operations": [{"op": "mask_pii"}, {"op": "dedup_exact"}, {"op": "dedup_near", "shingle_words": 5, "bands": 14, "rows": 8, "threshold": 0.72, "seed": 1},
                       {"op": "filter", "min_tokens": args.min_words, "max_tokens": args.max_words * 2}],
        "tokenizer_path": str(Path(args.tokenizer_path).resolve()), "output_dir": str(work / "cli-out"), "report_path": str(work / "cli-report.json"),
        "issues_path": str(work / "cli-issues.json"), "work_dir": str(work / "cli-work"), "memory_budget_mb": args.memory_budget_mb,
    }
    (work / "spec.json").write_text(json.dumps(spec))
    usage = measured([sys.executable, "-m", "hanzo_ml", "prepare-dataset", "--spec", str(work / "spec.json")])
    return usage, json.loads((work / "cli-report.json").read_text())


def machine() -> dict:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg": [round(x, 2) for x in os.getloadavg()]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/hanzo-ml-bench-data"))
    ap.add_argument("--ours", choices=["modules", "cli"], default="modules")
    ap.add_argument("--tokenizer-path")
    ap.add_argument("--memory-budget-mb", type=int, default=1024)
    ap.add_argument("--min-words", type=int, default=30)
    ap.add_argument("--max-words", type=int, default=150)
    ap.add_argument("--skip-datatrove", action="store_true")
    ap.add_argument("--micro-records", type=int, default=100_000, help="records for the MinHash back-end and PII timings (0: skip)")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    data = generated_input(args.work, args.records)
    env = {**os.environ, "PYTHONPATH": str(REPO / "trainer")}
    before = machine()
    truth = json.loads(data.with_suffix(".truth.json").read_text())
    words = ["--min-words", str(args.min_words), "--max-words", str(args.max_words)]
    result: dict = {"records": args.records, "input_bytes": data.stat().st_size, "planted": truth["counts"], "machine_before": before,
                    "memory_budget_mb": args.memory_budget_mb, "ours_via": args.ours, "length_filter_words": [args.min_words, args.max_words]}
    for side in ("ours", "datatrove"):
        subprocess.run(["rm", "-rf", str(args.work / side)], check=True)
    if args.ours == "cli":
        result["ours"], result["ours_report"] = run_ours_cli(args, data, args.work)
    else:
        result["ours"] = measured([sys.executable, str(HERE / "ours.py"), "--input", str(data), "--out-dir", str(args.work / "ours"),
                                   "--memory-budget-mb", str(args.memory_budget_mb), *words], env)
        result["ours_summary"] = json.loads((args.work / "ours" / "summary.json").read_text())
    if not args.skip_datatrove:
        result["datatrove"] = measured([str(datatrove_python()), str(HERE / "datatrove_side.py"), "--input", str(data),
                                        "--out-dir", str(args.work / "datatrove"), *words])
        result["datatrove_summary"] = json.loads((args.work / "datatrove" / "summary.json").read_text())
    for side in ("ours", "datatrove"):
        if side in result:
            cpu_h = result[side]["cpu_s"] / 3600
            result[side]["records_per_hour_per_core"] = round(args.records / cpu_h) if cpu_h else None
            result[side]["records_per_hour_wall"] = round(args.records / (result[side]["wall_s"] / 3600))
    for key, script in (("minhash_backends", "minhash_backends.py"), ("pii_speed", "pii_speed.py")):
        if args.micro_records:
            out = subprocess.run(["nice", "-n", "10", sys.executable, str(HERE / script), "--records", str(args.micro_records)],
                                 check=True, env=env, capture_output=True, text=True).stdout
            result[key] = json.loads(out)
    if args.ours == "modules" and not args.skip_datatrove:
        result["agreement"] = agreement(args.records, kept(args.work / "ours" / "kept.jsonl"), kept(args.work / "datatrove" / "kept.jsonl"), truth)
        result["speedup_per_core"] = round(result["ours"]["records_per_hour_per_core"] / result["datatrove"]["records_per_hour_per_core"], 2)
    result["machine_after"] = machine()
    result["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "data.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "data.md").write_text(render(result))
    print(render(result))


def render(r: dict) -> str:
    from render import markdown  # bench/data/render.py: the Markdown form of the JSON
    return markdown(r)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
