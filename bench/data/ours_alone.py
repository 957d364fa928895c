"""Our side of the full-chain bench alone (bench/data/chain.py's job, same spec), at sizes where datatrove is not run
beside it: CPU, wall and peak RSS by input size, appended to bench/results/data.json as `ours_only` and rendered
into data.md. For the memory curve and for sizes the shared machine has no time to run both sides at.

    PYTHONPATH=trainer <trainer venv python> bench/data/ours_alone.py --records 50000,1000000
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from chain import RESULTS, load, ours_options, run_ours  # noqa: E402  (bench/data/chain.py)
from generate import generated_input  # noqa: E402  (bench/data/generate.py)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", default="50000", help="input sizes, comma-separated")
    ours_options(ap)
    ap.add_argument("--work", type=Path, default=Path("/tmp/hanzo-ml-bench-data"))
    args = ap.parse_args()
    result = json.loads((RESULTS / "data.json").read_text())
    for records in sorted(int(x) for x in args.records.split(",")):
        data = generated_input(args.work, records)
        before = load()
        usage, report = run_ours(args, data, args.work / "ours-alone")
        row = {"records": records, **usage, "records_out": report["records_out"], "load_before": before, "load_after": load()}
        print(json.dumps(row), flush=True)
        result.setdefault("ours_only", [])
        result["ours_only"] = [o for o in result["ours_only"] if o["records"] != records] + [row]
        result.setdefault("ours_only_how", "Only our side, the same job and spec as above, at nice 10 on the same shared "
                          "machine; CPU and peak RSS of the whole process tree from the kernel (bench/data/ours_alone.py).")
        (RESULTS / "data.json").write_text(json.dumps(result, indent=2) + "\n")
        from render_chain import markdown

        (RESULTS / "data.md").write_text(markdown(result))


if __name__ == "__main__":
    main()
