"""The stock mlflow client's own cost per benchmark operation, with no server at all: the floor under any
client-level latency in bench/results/tracking.md, whichever server answers.

    python bench/tracking/client_floor.py [--repeat N]     # the mlflow venv's python (.bootstrap.json: mlflow_python)

It times the same client code a request goes through, on the same payloads the benchmark moves, in one process:
- ingest: building one log_batch request of 1,000 metrics (Metric.to_proto, LogBatch, message_to_json);
- history: decoding the get-history pages of a series (json.loads, parse_dict into the response proto,
  Metric.from_proto per point), 25,000 points a page as both servers send them;
- search: decoding one runs/search answer of 100 runs with two metrics and four tags each (Run.from_proto).
A server that answered in no time would still leave the client-level latency at this floor (higher while the
client processes share cores with the server), so MLflow's client-level latency divided by the floor bounds
the client-level ratio any server can reach. Writes bench/results/tracking-client-floor.{json,md}, with those
bounds computed from the client-level rows of bench/results/tracking.json when it is there.
"""

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("PYTHONWARNINGS", "ignore")

from mlflow.entities import Metric, Run  # noqa: E402
from mlflow.protos.service_pb2 import GetMetricHistory, LogBatch, SearchRuns  # noqa: E402
from mlflow.utils.proto_json_utils import message_to_json, parse_dict  # noqa: E402

PAGE = 25_000  # get-history page size of both servers
RESULTS = Path(__file__).resolve().parents[1] / "results"


def timed_ms(fn, repeat: int) -> dict:
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1000.0)
    return {"p50_ms": statistics.median(samples), "min_ms": min(samples), "repeat": repeat}


def ingest_request() -> str:
    metrics = [Metric(f"metric_{k}", (k * 7_919 + s) / 1024.0 + 0.1, 1_700_000_000_000 + s, s)
               for k in range(10) for s in range(100)]
    return message_to_json(LogBatch(run_id="0" * 32, metrics=[m.to_proto() for m in metrics]))


def history_page_text(start: int) -> str:
    points = [{"key": "loss", "value": (start + i) / 1024.0 + 0.1, "timestamp": 1_700_000_000_000 + start + i,
               "step": start + i} for i in range(PAGE)]
    return json.dumps({"metrics": points, "next_page_token": "x"})


def decode_history_page(text: str) -> list:
    response = GetMetricHistory.Response()
    parse_dict(json.loads(text), response)
    return [Metric.from_proto(m) for m in response.metrics]


def search_answer_text(runs: int = 100) -> str:
    def run(i: int) -> dict:
        run_id = f"{i:032x}"
        return {
            "info": {"run_id": run_id, "run_uuid": run_id, "run_name": f"r{i}", "experiment_id": "1", "user_id": "root",
                     "status": "FINISHED", "start_time": 1_700_000_000_000 + i, "end_time": 1_700_000_000_500 + i,
                     "artifact_uri": f"mlflow-artifacts:/1/{run_id}/artifacts", "lifecycle_stage": "active"},
            "data": {"metrics": [{"key": "accuracy", "value": 0.9, "timestamp": 1_700_000_000_000, "step": 0},
                                 {"key": "loss", "value": 0.1, "timestamp": 1_700_000_000_000, "step": 0}],
                     "tags": [{"key": "mlflow.runName", "value": f"r{i}"}, {"key": "mlflow.user", "value": "root"},
                              {"key": "mlflow.source.name", "value": "driver.py"},
                              {"key": "mlflow.source.type", "value": "LOCAL"}]},
            "inputs": {}, "outputs": {},
        }
    return json.dumps({"runs": [run(i) for i in range(runs)], "next_page_token": "x"})


def decode_search(text: str) -> list:
    response = SearchRuns.Response()
    parse_dict(json.loads(text), response)
    return [Run.from_proto(r) for r in response.runs]


def bounds(floor: dict) -> list[dict]:
    """For each client-level row of tracking.json: MLflow's client-level p50 over the floor."""
    path = RESULTS / "tracking.json"
    if not path.is_file():
        return []
    rows = []
    per_op = {"ingest": floor["ingest_request_1000_metrics"]["p50_ms"], "history": floor["history_series"]["p50_ms"],
              "search": floor["search_answer_100_runs"]["p50_ms"]}
    for backend, b in json.loads(path.read_text())["backends"].items():
        for workload, floor_ms in per_op.items():
            r = b["results"].get(workload)
            if r:
                rows.append({"backend": backend, "workload": workload, "floor_ms": round(floor_ms, 1),
                             "mlflow_p50_ms": r["mlflow"]["p50_ms"], "hanzo_p50_ms": r["hanzo"]["p50_ms"],
                             "measured_p50_speedup": r["p50_speedup"],
                             "bound_p50_speedup": round(r["mlflow"]["p50_ms"] / floor_ms, 2),
                             "hanzo_over_floor": round(r["hanzo"]["p50_ms"] / floor_ms, 2),
                             "mlflow_over_floor": round(r["mlflow"]["p50_ms"] / floor_ms, 2)})
    return rows


def markdown(out: dict) -> str:
    f = out["floor"]
    lines = [
        "# Tracking: the stock mlflow client's own cost (no server)", "",
        f"Produced by `{out['command']}` on {out['date']}; mlflow {out['mlflow']}, python {out['python']}, one process.", "",
        "What a server that answered instantly would still leave of each client-level operation "
        "(bench/tracking/client_floor.py says what is timed):", "",
        "| operation | client work, p50 ms |", "| --- | ---: |",
        f"| build one log_batch request of 1,000 metrics | {f['ingest_request_1000_metrics']['p50_ms']:.1f} |",
        f"| decode one get-history page of 25,000 points | {f['history_page_25000_points']['p50_ms']:.1f} |",
        f"| decode a whole {f['history_series']['points']:,}-point series ({f['history_series']['pages']} pages) "
        f"| {f['history_series']['p50_ms']:.0f} |",
        f"| decode one runs/search answer of 100 runs | {f['search_answer_100_runs']['p50_ms']:.1f} |", "",
    ]
    if out["bounds"]:
        lines += [
            "Against the client-level rows of tracking.md: MLflow's p50 divided by the floor is the most any server "
            "could gain there (less in that run, where 4 client processes share 2 cores with the server). "
            "hanzo-ml's p50 over the floor is how far our client-level time is from the client's own cost: "
            "1.0x would mean the server costs the client nothing.", "",
            "| backend | workload | floor ms | mlflow p50 ms | hanzo-ml p50 ms | hanzo-ml / floor | measured p50 speed-up | bound |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
            *[f"| {r['backend']} | {r['workload']} | {r['floor_ms']} | {r['mlflow_p50_ms']} | {r['hanzo_p50_ms']} | "
              f"{r['hanzo_over_floor']}x | {r['measured_p50_speedup']}x | {r['bound_p50_speedup']}x |" for r in out["bounds"]], "",
        ]
    return "\n".join(lines)


def main() -> None:
    import mlflow

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=20)
    o = p.parse_args()
    settings = json.loads((RESULTS / "tracking.json").read_text())["settings"] if (RESULTS / "tracking.json").is_file() else {}
    points = settings.get("history", {}).get("points", 1_000_000)
    page, answer = history_page_text(0), search_answer_text()
    assert len(decode_history_page(page)) == PAGE and len(decode_search(answer)) == 100
    floor = {
        "ingest_request_1000_metrics": timed_ms(ingest_request, o.repeat),
        "history_page_25000_points": timed_ms(lambda: decode_history_page(page), max(3, o.repeat // 4)),
        "search_answer_100_runs": timed_ms(lambda: decode_search(answer), o.repeat),
    }
    pages = -(-points // PAGE)
    floor["history_series"] = {"points": points, "pages": pages,
                               "p50_ms": floor["history_page_25000_points"]["p50_ms"] * pages}
    out = {"benchmark": "tracking-client-floor", "command": "python bench/tracking/client_floor.py",
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "mlflow": mlflow.__version__,
           "python": platform.python_version(), "floor": floor, "bounds": bounds(floor)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "tracking-client-floor.json").write_text(json.dumps(out, indent=2) + "\n")
    (RESULTS / "tracking-client-floor.md").write_text(markdown(out))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
