"""Throughput of prepare-dataset on generated chat records: records/s of wall time and CPU seconds per record.

    PYTHONPATH=trainer python trainer/scripts/bench_prepare.py --workdir /tmp/prep-bench --tokenizer DIR \
        [--records 100000] [--threads 2] [--full]

Without --full the job deduplicates and splits (and counts tokens, as every job does); with --full it also filters
by tokens and language, shuffles and tokenizes. CPU time includes the worker processes; on a busy machine the
wall time says more about the machine than about the job, the CPU time does not.
"""
from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

WORDS = ("the a password reset account billing invoice refund shipping order track login error help please thanks "
         "email link page open close update change settings profile team member plan upgrade cancel").split()


def write_records(path: Path, count: int) -> None:
    rng = random.Random(0)
    with open(path, "w", encoding="utf-8") as out:
        for _ in range(count):
            question = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30)))
            answer = " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 60)))
            out.write(json.dumps({"messages": [{"role": "user", "content": question},
                                               {"role": "assistant", "content": answer}]}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--tokenizer", type=Path, required=True, help="a model directory with tokenizer.json")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--full", action="store_true")
    args = parser.parse_args()
    work = args.workdir.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    write_records(work / "in.jsonl", args.records)
    operations = [{"op": "dedup_exact"}]
    if args.full:
        operations += [{"op": "filter", "min_tokens": 10, "languages": ["en"]}, {"op": "augment", "shuffle_seed": 1},
                       {"op": "tokenize", "max_length": 512}]
    spec = {"kind": "prepare-dataset", "job_name": "bench", "operations": operations, "threads": args.threads,
            "sources": [{"path": str(work / "in.jsonl"), "display_name": "in.jsonl"}],
            "split": {"seed": 42, "train": 0.8, "validation": 0.1, "test": 0.1},
            "tokenizer_path": str(args.tokenizer.resolve()), "output_dir": str(work / "out"),
            "report_path": str(work / "report.json"), "issues_path": str(work / "issues.json"),
            "work_dir": str(work / "scratch")}
    (work / "job.json").write_text(json.dumps(spec, indent=2))
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "hanzo_ml", "prepare-dataset", "--spec", str(work / "job.json")],
                   check=True)
    wall = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
    report = json.loads((work / "report.json").read_text())
    print(json.dumps({"records": args.records, "records_out": report["records_out"], "wall_s": round(wall, 1),
                      "records_per_s": round(args.records / wall), "cpu_s": round(cpu, 1),
                      "cpu_us_per_record": round(cpu / args.records * 1e6),
                      "peak_rss_mb": report["peak_rss_mb"],
                      "operations_s": {o["op"]: o["seconds"] for o in report["operations"]}}, indent=2))


if __name__ == "__main__":
    main()
