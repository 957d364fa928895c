"""The tracking benchmark's load driver: the stock mlflow client, from N concurrent processes.

    python bench/tracking/driver.py ingest|history|search --uri http://127.0.0.1:PORT --procs N [options]

Prints one JSON object: wall time, points moved, per-request latencies (ms) and what the read-back check found.
The same script drives hanzo-ml and `mlflow server`, so both pay the same client overhead. Values are a pure
function of (run, key, step), so every check recomputes what was written instead of remembering it.
"""

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
import uuid

os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # a failed request must fail the benchmark
os.environ.setdefault("PYTHONWARNINGS", "ignore")

import requests  # noqa: E402
from mlflow.entities import Metric  # noqa: E402
from mlflow.protos.service_pb2 import LogBatch  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402
from mlflow.utils.proto_json_utils import message_to_json  # noqa: E402

BATCH = 1000  # MLflow's per-request metric limit
TOKEN = os.environ.get("MLFLOW_TRACKING_TOKEN")


def value_of(run_index: int, key_index: int, step: int) -> float:
    """Distinct, exactly representable-in-JSON doubles (repr round-trips)."""
    return (run_index * 1_000_003 + key_index * 7_919 + step) / 1024.0 + 0.1


def timed(latencies, fn, *args, **kwargs):
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    latencies.append((time.perf_counter() - t) * 1000.0)
    return out


def start_together(barrier):
    barrier.wait()
    return time.perf_counter()


# ---- (a) ingest: each process logs its runs' batches of 1,000 metrics ----


def ingest_worker(args):
    uri, exp_id, proc, runs, batches, keys, barrier = args
    client = MlflowClient(uri)
    run_ids = [client.create_run(exp_id, run_name=f"ingest-{proc}-{r}").info.run_id for r in range(runs)]
    per_key = BATCH // keys
    latencies = []
    t0 = start_together(barrier)
    for r, run_id in enumerate(run_ids):
        run_index = proc * runs + r
        for b in range(batches):
            ts = 1_700_000_000_000 + b
            metrics = [
                Metric(f"m{k}", value_of(run_index, k, b * per_key + i), ts, b * per_key + i)
                for k in range(keys)
                for i in range(per_key)
            ]
            timed(latencies, client.log_batch, run_id, metrics=metrics)
    t1 = time.perf_counter()
    return {"t0": t0, "t1": t1, "latencies": latencies, "runs": [(proc * runs + r, run_id) for r, run_id in enumerate(run_ids)]}


def wire_ingest_worker(args):
    """The same log-batch requests, encoded beforehand by the client's own encoder and posted as bytes: what
    the server costs without the client's per-request protobuf work."""
    uri, exp_id, proc, runs, batches, keys, barrier = args
    client = MlflowClient(uri)
    session = requests.Session()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {TOKEN}"} if TOKEN else {})}
    per_key = BATCH // keys
    bodies, run_ids = [], []
    for r in range(runs):
        run_id = client.create_run(exp_id, run_name=f"wire-{proc}-{r}").info.run_id
        run_ids.append((proc * runs + r, run_id))
        for b in range(batches):
            ts = 1_700_000_000_000 + b
            metrics = [Metric(f"m{k}", value_of(proc * runs + r, k, b * per_key + i), ts, b * per_key + i) for k in range(keys) for i in range(per_key)]
            bodies.append(message_to_json(LogBatch(run_id=run_id, metrics=[m.to_proto() for m in metrics])))
    latencies = []
    t0 = start_together(barrier)
    for body in bodies:
        t = time.perf_counter()
        response = session.post(f"{uri}/api/2.0/mlflow/runs/log-batch", data=body, headers=headers)
        latencies.append((time.perf_counter() - t) * 1000.0)
        response.raise_for_status()
    return {"t0": t0, "t1": time.perf_counter(), "latencies": latencies, "runs": run_ids}


def check_run(client, run_index, run_id, keys, steps):
    """Every point read back equals the point written, and the run's latest value is the last step's."""
    problems = []
    latest = client.get_run(run_id).data.metrics
    for k in range(keys):
        history = client.get_metric_history(run_id, f"m{k}")
        got = sorted((m.step, m.value) for m in history)
        want = [(s, value_of(run_index, k, s)) for s in range(steps)]
        if got != want:
            problems.append(f"run {run_id} m{k}: read {len(got)} points, wrote {len(want)}; equal={got == want}")
        if latest.get(f"m{k}") != value_of(run_index, k, steps - 1):
            problems.append(f"run {run_id} m{k}: latest value {latest.get(f'm{k}')} is not the last step's")
    return problems


def verify_worker(args):
    uri, runs, keys, steps = args
    client = MlflowClient(uri)
    problems, points = [], 0
    for run_index, run_id in runs:
        problems += check_run(client, run_index, run_id, keys, steps)
        points += keys * steps
    return {"problems": problems, "points": points}


def run_ingest(o):
    client = MlflowClient(o.uri)
    exp_id = client.create_experiment(f"bench-ingest-{uuid.uuid4().hex[:8]}")
    barrier = mp.Manager().Barrier(o.procs)
    with mp.Pool(o.procs) as pool:
        results = pool.map(wire_ingest_worker if o.wire else ingest_worker, [(o.uri, exp_id, p, o.runs, o.batches, o.keys, barrier) for p in range(o.procs)])
        runs = [r for res in results for r in res["runs"]]
        steps = o.batches * (BATCH // o.keys)
        checks = pool.map(verify_worker, [(o.uri, runs[p :: o.procs], o.keys, steps) for p in range(o.procs)])
    wall = max(r["t1"] for r in results) - min(r["t0"] for r in results)
    written = o.procs * o.runs * o.batches * BATCH
    return {
        "wall_s": wall,
        "points": written,
        "requests": written // BATCH,
        "latencies_ms": [x for r in results for x in r["latencies"]],
        "read_back_points": sum(c["points"] for c in checks) if not any(c["problems"] for c in checks) else 0,
        "problems": [p for c in checks for p in c["problems"]][:20],
    }


# ---- (b) get-metric-history of one long run ----


def seed_history_worker(args):
    uri, run_id, batch_ids, barrier = args
    client = MlflowClient(uri)
    latencies = []
    t0 = start_together(barrier)
    for b in batch_ids:
        metrics = [Metric("loss", value_of(0, 0, s), 1_700_000_000_000 + s, s) for s in range(b * BATCH, (b + 1) * BATCH)]
        timed(latencies, client.log_batch, run_id, metrics=metrics)
    return {"t0": t0, "t1": time.perf_counter(), "latencies": latencies}


def read_history_worker(args):
    uri, run_id, reads, points, wire, barrier = args
    client = MlflowClient(uri)
    session = requests.Session()
    latencies, problems = [], []
    t0 = start_together(barrier)
    for i in range(reads):
        t = time.perf_counter()
        history = read_history_wire(session, uri, run_id) if wire else client.get_metric_history(run_id, "loss")
        latencies.append((time.perf_counter() - t) * 1000.0)
        if i == 0:  # the full value check runs once per process, after (not inside) the timed call
            got = sorted(position(m) for m in history)
            if len(got) != points or any(g != (s, value_of(0, 0, s), 1_700_000_000_000 + s) for s, g in enumerate(got)):
                problems.append(f"read {len(got)} points, wrote {points}, or values differ")
        elif len(history) != points:
            problems.append(f"read {len(history)} points, wrote {points}")
    return {"t0": t0, "t1": time.perf_counter(), "latencies": latencies, "problems": problems}


def read_history_wire(session, uri, run_id):
    """Pages through get-history as the client does (25,000 per page), parsing JSON but building no objects."""
    points, token = [], None
    headers = {"Authorization": f"Bearer {TOKEN}"} if TOKEN else {}
    while True:
        params = {"run_id": run_id, "metric_key": "loss", "max_results": 25_000, **({"page_token": token} if token else {})}
        response = session.get(f"{uri}/api/2.0/mlflow/metrics/get-history", params=params, headers=headers)
        response.raise_for_status()
        body = response.json()
        points += body.get("metrics", [])
        token = body.get("next_page_token")
        if not token:
            return points


def position(m):
    """(step, value, timestamp) of a client Metric or of a wire JSON point."""
    if isinstance(m, dict):
        return (int(m.get("step", 0)), m["value"], int(m["timestamp"]))
    return (m.step, m.value, m.timestamp)


def run_history(o):
    """Seeds one long run, then reads it whole with the stock client and again at the wire level."""
    client = MlflowClient(o.uri)
    exp_id = client.create_experiment(f"bench-history-{uuid.uuid4().hex[:8]}")
    run_id = client.create_run(exp_id, run_name="long-run").info.run_id
    n_batches = o.points // BATCH
    manager = mp.Manager()
    phases = {}
    with mp.Pool(o.procs) as pool:
        barrier = manager.Barrier(o.procs)
        seeded = pool.map(seed_history_worker, [(o.uri, run_id, list(range(p, n_batches, o.procs)), barrier) for p in range(o.procs)])
        for name, wire in (("client", False), ("wire", True)):
            barrier = manager.Barrier(o.procs)
            phases[name] = pool.map(read_history_worker, [(o.uri, run_id, o.reads, n_batches * BATCH, wire, barrier) for _ in range(o.procs)])

    def summary(reads):
        problems = [p for r in reads for p in r["problems"]]
        return {
            "wall_s": max(r["t1"] for r in reads) - min(r["t0"] for r in reads),
            "reads": o.procs * o.reads,
            "points_read": o.procs * o.reads * n_batches * BATCH,
            "latencies_ms": [x for r in reads for x in r["latencies"]],
            "read_back_points": 0 if problems else n_batches * BATCH,
            "problems": problems[:20],
        }

    out = summary(phases["client"])
    wire = summary(phases["wire"])
    return {
        "points": n_batches * BATCH,
        "seed": {"wall_s": max(r["t1"] for r in seeded) - min(r["t0"] for r in seeded), "latencies_ms": [x for r in seeded for x in r["latencies"]]},
        **out,
        "wire": wire,
        "problems": out["problems"] + wire["problems"],
    }


# ---- (c) search-runs with a metric filter and ordering ----


def accuracy_of(i: int) -> float:
    """A permutation of 0..n-1 scaled into [0, 1): distinct values, so the expected order is unambiguous."""
    return ((i * 7_919) % 1_000_003) / 1_000_003.0


def seed_search_worker(args):
    uri, exp_id, indices, barrier = args
    client = MlflowClient(uri)
    latencies, made = [], []
    t0 = start_together(barrier)
    for i in indices:
        run_id = timed(latencies, client.create_run, exp_id, run_name=f"r{i}").info.run_id
        timed(latencies, client.log_batch, run_id, metrics=[Metric("accuracy", accuracy_of(i), 1_700_000_000_000, 0), Metric("loss", 1.0 - accuracy_of(i), 1_700_000_000_000, 0)])
        made.append((i, run_id))
    return {"t0": t0, "t1": time.perf_counter(), "latencies": latencies, "runs": made}


SEARCH_FILTER = "metrics.accuracy > 0.5"
SEARCH_ORDER = ["metrics.accuracy DESC"]


def search_worker(args):
    uri, exp_id, queries, page, expected, wire, barrier = args
    client = MlflowClient(uri)
    session = requests.Session()
    latencies, problems = [], []
    t0 = start_together(barrier)
    for q in range(queries):
        if wire:
            found = timed(latencies, search_wire, session, uri, exp_id, page)
        else:
            found = [r.info.run_id for r in timed(latencies, client.search_runs, [exp_id], filter_string=SEARCH_FILTER, order_by=SEARCH_ORDER, max_results=page)]
        if q == 0 and found != expected:
            problems.append(f"search returned {len(found)} runs; the expected top {len(expected)} in order: {found == expected}")
    return {"t0": t0, "t1": time.perf_counter(), "latencies": latencies, "problems": problems}


def search_wire(session, uri, exp_id, page):
    """The client's runs/search request, JSON-parsed but with no client objects built; the run ids in order."""
    headers = {"Authorization": f"Bearer {TOKEN}"} if TOKEN else {}
    body = {"experiment_ids": [exp_id], "filter": SEARCH_FILTER, "order_by": SEARCH_ORDER, "max_results": page, "run_view_type": "ACTIVE_ONLY"}
    response = session.post(f"{uri}/api/2.0/mlflow/runs/search", json=body, headers=headers)
    response.raise_for_status()
    return [r["info"]["run_id"] for r in response.json().get("runs", [])]


def run_search(o):
    """Seeds the runs, then searches them with the stock client and again at the wire level."""
    client = MlflowClient(o.uri)
    exp_id = client.create_experiment(f"bench-search-{uuid.uuid4().hex[:8]}")
    manager = mp.Manager()
    phases = {}
    with mp.Pool(o.procs) as pool:
        barrier = manager.Barrier(o.procs)
        seeded = pool.map(seed_search_worker, [(o.uri, exp_id, list(range(p, o.runs, o.procs)), barrier) for p in range(o.procs)])
        runs = dict(r for s in seeded for r in s["runs"])
        ranked = sorted((i for i in runs if accuracy_of(i) > 0.5), key=accuracy_of, reverse=True)
        expected = [runs[i] for i in ranked[: o.page]]
        for name, wire in (("client", False), ("wire", True)):
            barrier = manager.Barrier(o.procs)
            phases[name] = pool.map(search_worker, [(o.uri, exp_id, o.queries, o.page, expected, wire, barrier) for _ in range(o.procs)])

    def summary(searched):
        return {
            "wall_s": max(r["t1"] for r in searched) - min(r["t0"] for r in searched),
            "queries": o.procs * o.queries,
            "points_read": o.procs * o.queries * len(expected),
            "latencies_ms": [x for s in searched for x in s["latencies"]],
            "problems": [p for s in searched for p in s["problems"]][:20],
        }

    out, wire = summary(phases["client"]), summary(phases["wire"])
    return {
        "runs": len(runs),
        "matching_runs": len(ranked),
        "page": o.page,
        "seed": {"wall_s": max(r["t1"] for r in seeded) - min(r["t0"] for r in seeded), "latencies_ms": [x for r in seeded for x in r["latencies"]]},
        **out,
        "wire": wire,
        "problems": out["problems"] + wire["problems"],
    }


def positive(text):
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return n


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", choices=["ingest", "history", "search"])
    p.add_argument("--uri", required=True, help="tracking server URL")
    p.add_argument("--procs", type=positive, default=4, help="concurrent client processes")
    p.add_argument("--runs", type=positive, default=4, help="ingest: runs per process; search: runs in the experiment")
    p.add_argument("--batches", type=positive, default=10, help="ingest: log-batch requests of 1,000 metrics per run")
    p.add_argument("--keys", type=positive, default=10, help="ingest: metric keys per batch (1,000 / keys steps each)")
    p.add_argument("--points", type=positive, default=1_000_000, help="history: points in the long run (multiple of 1,000)")
    p.add_argument("--reads", type=positive, default=3, help="history: full-history reads per process")
    p.add_argument("--queries", type=positive, default=10, help="search: searches per process")
    p.add_argument("--page", type=positive, default=100, help="search: max_results of each search")
    p.add_argument("--wire", action="store_true", help="ingest: post requests encoded beforehand by the client's encoder, to time the server alone")
    o = p.parse_args(argv)
    if BATCH % o.keys:
        p.error(f"--keys must divide {BATCH}, got {o.keys}")
    if o.points % BATCH:
        p.error(f"--points must be a multiple of {BATCH}, got {o.points}")
    out = {"ingest": run_ingest, "history": run_history, "search": run_search}[o.workload](o)
    json.dump(out, sys.stdout)
    return 1 if out["problems"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
