"""The prepare-dataset engine at an earlier commit against the working tree's, alternating on the same input (the
chain's job and spec, bench/data/chain.py): CPU a record of the main process and of its worker processes, the
version hash (the output must not change) and peak RSS. Appends `engine_before_after.runs` to
bench/results/data.json (the prose around it is written by hand).

    PYTHONPATH=trainer <trainer venv python> bench/data/engine_ab.py --before 21e7a65 --records 60000 --runs 2

The input is the first --records lines of the cached 200,000-record chain input (bench/data/generate.py). Each run
is a child process at nice 10 that calls prepare_dataset as `python -m hanzo_ml prepare-dataset` does; its own CPU
(process_time: the main thread and any other thread) is the main process's, RUSAGE_CHILDREN after the job is its
worker processes'.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
from chain import RESULTS, load, our_spec, ours_options  # noqa: E402  (bench/data/chain.py)
from generate import generated_input  # noqa: E402  (bench/data/generate.py)

CHILD = """
import json, resource, sys, time
from pathlib import Path
started = time.process_time()
from hanzo_ml.spec import load_spec
from hanzo_ml.dataprep.run import prepare_dataset
spec_path = Path(sys.argv[1])
report = prepare_dataset(load_spec(spec_path, "prepare-dataset"), spec_path)
main = time.process_time() - started
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"main_s": main, "workers_s": kids.ru_utime + kids.ru_stime, "sha256": report["sha256"],
                  "records_in": report["records_in"], "records_out": report["records_out"],
                  "peak_rss_mb": report["peak_rss_mb"]}))
"""


def engine_at(commit: str, into: Path) -> Path:
    """trainer/ of the repository at `commit` (git archive), for PYTHONPATH."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "trainer/hanzo_ml"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "trainer"


def head_of(source: Path, records: int, into: Path) -> Path:
    path = into / f"chat-{records}.jsonl"
    with open(source, "rb") as lines, open(path, "wb") as out:
        for _, line in zip(range(records), lines):
            out.write(line)
    return path


def one_run(args, trainer: Path, data: Path, work: Path) -> dict:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(trainer),
           "HANZO_ML_CONTRACTS_DIR": str(REPO / "contracts" / "generated")}
    before = load()
    started = time.perf_counter()
    out = subprocess.run(["nice", "-n", "10", sys.executable, "-c", CHILD, str(our_spec(args, data, work))], env=env,
                         check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - started
    row = json.loads(out.strip().splitlines()[-1])
    n = row["records_in"]
    return {"main_us": round(row["main_s"] / n * 1e6), "workers_us": round(row["workers_s"] / n * 1e6),
            "cpu_us_per_record": round((row["main_s"] + row["workers_s"]) / n * 1e6), "sha256": row["sha256"],
            "records_out": row["records_out"], "peak_rss_mb": row["peak_rss_mb"], "wall_s": round(wall, 1), "load_before": before}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="the earlier engine's commit")
    ap.add_argument("--records", type=int, default=60000)
    ap.add_argument("--runs", type=int, default=2, help="runs of each engine, alternating")
    ap.add_argument("--work", type=Path, default=Path("/tmp/hanzo-ml-bench-data"))
    ours_options(ap)
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="engine-ab-", dir=args.work))
    try:
        engines = {f"before {args.before}": engine_at(args.before, scratch / "before"), "this change": REPO / "trainer"}
        data = head_of(generated_input(args.work, 200_000), args.records, scratch)
        runs = []
        for n in range(args.runs):
            for name, trainer in engines.items():
                row = {"engine": name, "run": n + 1, **one_run(args, trainer, data, scratch / "job")}
                print(json.dumps(row), flush=True)
                runs.append(row)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result = json.loads((RESULTS / "data.json").read_text())
    result.setdefault("engine_before_after", {})["runs"] = runs
    result["engine_before_after"]["records"] = args.records
    (RESULTS / "data.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
