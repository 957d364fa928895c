"""A fixed MLflow tracking scenario run with the stock mlflow client; prints a normalized JSON transcript.

    MLFLOW_TRACKING_URI=http://127.0.0.1:PORT MLFLOW_TRACKING_TOKEN=... python scenario.py transcript.json

Run once against the reference `mlflow server` and once against hanzo-ml: the transcripts must be equal.
Server-chosen values (run and experiment ids, times, artifact locations) become placeholders.
"""

import math
import os

import requests

import mlflow
import mlflow.tracking._tracking_service.client as tracking_client
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
from transcript import Transcript

# A small history page size, so the client must follow next_page_token across pages.
tracking_client.GET_METRIC_HISTORY_MAX_RESULTS = 1000

URI = os.environ["MLFLOW_TRACKING_URI"]
HEADERS = {"Authorization": f"Bearer {os.environ.get('MLFLOW_TRACKING_TOKEN', '')}"}
client = MlflowClient()
_transcript = Transcript(scrub=lambda text: scrub(text))
transcript, ids, placeholder, record = _transcript.entries, _transcript.ids, _transcript.placeholder, _transcript.record


def scrub(text):
    for (kind, value), name in ids.items():
        if kind == "run":
            text = text.replace(value, name)
    return text


def number(v):
    return "NaN" if isinstance(v, float) and math.isnan(v) else v


def run_view(run):
    info = run.info
    return {
        "run_id": placeholder(info.run_id, "run"),
        "run_name": info.run_name,
        "experiment_id": placeholder(info.experiment_id, "exp"),
        "status": info.status,
        "lifecycle_stage": info.lifecycle_stage,
        "has_start_time": info.start_time is not None,
        "has_end_time": info.end_time is not None,
        "params": dict(sorted(run.data.params.items())),
        "metrics": {k: number(v) for k, v in sorted(run.data.metrics.items())},
        "tags": {k: v for k, v in sorted(run.data.tags.items()) if not k.startswith("mlflow.source.")},
    }


def rest(step, method, path, body):
    """A raw REST call, for requests the client would refuse or split before sending."""
    res = requests.request(method, f"{URI}/api/2.0/mlflow/{path}", json=body, headers=HEADERS, timeout=60)
    payload = res.json()
    transcript.append({"step": step, "status": res.status_code, "error": payload.get("error_code"), "message": scrub(payload.get("message", ""))})


def main():
    exp = mlflow.set_experiment("compat-exp")
    placeholder(exp.experiment_id, "exp")
    client.set_experiment_tag(exp.experiment_id, "team", "ml")
    record("get experiment by name", lambda: {k: v for k, v in vars(client.get_experiment_by_name("compat-exp")).items() if k in ("_name", "_lifecycle_stage", "_tags")})
    record("search experiments", lambda: [e.name for e in client.search_experiments(filter_string="name LIKE 'compat-%' AND tags.team = 'ml'")])
    record("default experiment", lambda: client.get_experiment("0").name)
    record("missing experiment", lambda: client.get_experiment_by_name("no-such-experiment"))

    with mlflow.start_run(run_name="alpha") as run:
        alpha = run.info.run_id
        placeholder(alpha, "run")
        mlflow.log_param("lr", "0.1")
        mlflow.log_params({"batch": "32", "optimizer": "adam"})
        mlflow.log_metric("loss", 1.0, step=0)
        mlflow.log_metrics({"loss": 0.5, "acc": 0.8}, step=1)
        mlflow.log_metric("odd", float("nan"))
        mlflow.set_tag("team", "ml")
        mlflow.set_tags({"stage": "dev", "tmp": "x"})
        client.delete_tag(alpha, "tmp")
        mlflow.log_param("lr", "0.1")  # the same value again is fine
        record("change a param", lambda: mlflow.log_param("lr", "0.2"))
        series = [Metric("series", float(i) / 10, 1_700_000_000_000 + i, i) for i in range(2500)]
        client.log_batch(alpha, metrics=series)

    with mlflow.start_run(run_name="beta") as run:
        beta = run.info.run_id
        placeholder(beta, "run")
        mlflow.log_params({"lr": "0.01", "batch": "64"})
        mlflow.log_metric("loss", 0.3)
        mlflow.set_tag("team", "research")
    client.set_terminated(beta, status="FAILED")

    with mlflow.start_run(run_name="gamma") as run:
        gamma = run.info.run_id
        placeholder(gamma, "run")
        mlflow.log_param("lr", "1")
        mlflow.log_metric("loss", 0.7)

    record("get alpha", lambda: run_view(client.get_run(alpha)))
    record("get beta", lambda: run_view(client.get_run(beta)))
    record("missing run", lambda: client.get_run("0" * 32))

    history = client.get_metric_history(alpha, "series")
    record("history", lambda: {"count": len(history), "first": [history[0].step, history[0].value, history[0].timestamp], "last": [history[-1].step, history[-1].value], "steps_in_order": [m.step for m in history] == list(range(2500))})

    eid = exp.experiment_id
    search = lambda **kw: [r.info.run_name for r in client.search_runs([eid], **kw)]
    record("search by metric and param", lambda: search(filter_string="metrics.loss < 0.6 AND params.lr LIKE '0.%'", order_by=["metrics.loss ASC"]))
    record("search by status", lambda: search(filter_string="attributes.status = 'FAILED'"))
    record("search by tag", lambda: search(filter_string="tags.team = 'ml'"))
    record("search by run name", lambda: search(filter_string="attributes.run_name ILIKE 'A%'"))
    record("search ordered by param", lambda: search(order_by=["params.lr DESC"]))
    record("search default order", lambda: search())

    def pages():
        out, token = [], None
        while True:
            page = client.search_runs([eid], order_by=["attributes.run_name ASC"], max_results=2, page_token=token)
            out.append([r.info.run_name for r in page])
            token = page.token
            if not token:
                return out

    record("search in pages", pages)
    record("bad filter", lambda: client.search_runs([eid], filter_string="metrics.loss LIKE 'x'"))

    client.delete_run(gamma)
    record("deleted run is hidden", lambda: search())
    record("deleted run stays readable", lambda: client.get_run(gamma).info.lifecycle_stage)
    record("log to a deleted run", lambda: client.log_metric(gamma, "loss", 0.1))
    record("deleted runs view", lambda: [r.info.run_name for r in client.search_runs([eid], run_view_type=2)])
    client.restore_run(gamma)
    record("restored run is back", lambda: search(order_by=["attributes.run_name ASC"]))

    record("batch: changing a param", lambda: client.log_batch(beta, params=[Param("lr", "0.5")]))
    record("batch: tags and params", lambda: client.log_batch(gamma, params=[Param("extra", "1")], tags=[RunTag("note", "ok")]) or run_view(client.get_run(gamma))["tags"]["note"])
    metrics = [{"key": "m", "value": 1.0, "timestamp": 1, "step": i} for i in range(1001)]
    rest("batch: 1001 metrics", "POST", "runs/log-batch", {"run_id": gamma, "metrics": metrics})
    rest("batch: duplicate param keys", "POST", "runs/log-batch", {"run_id": gamma, "params": [{"key": "p", "value": "1"}, {"key": "p", "value": "2"}]})
    rest("log-metric: bad key", "POST", "runs/log-metric", {"run_id": gamma, "key": "bad key!", "value": 1.0, "timestamp": 1, "step": 0})
    rest("log-metric: key escaping", "POST", "runs/log-metric", {"run_id": gamma, "key": "../escape", "value": 1.0, "timestamp": 1, "step": 0})
    rest("log-metric: unknown run", "POST", "runs/log-metric", {"run_id": "f" * 32, "key": "k", "value": 1.0, "timestamp": 1, "step": 0})

    _transcript.write()


if __name__ == "__main__":
    main()
