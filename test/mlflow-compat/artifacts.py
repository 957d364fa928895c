"""A fixed MLflow artifact, dataset and logged-model scenario run with the stock mlflow client; writes a
normalized JSON transcript.

    MLFLOW_TRACKING_URI=http://127.0.0.1:PORT MLFLOW_TRACKING_TOKEN=... python artifacts.py transcript.json

Run once against the reference `mlflow server` (artifact serving on) and once against hanzo-ml: the
transcripts must be equal. Server-chosen values (run, experiment and model ids, times) become placeholders.
"""

import json
import os
import re
import tempfile

import pandas as pd
import requests

import mlflow
import mlflow.pyfunc
from mlflow import MlflowClient
from transcript import Transcript

URI = os.environ["MLFLOW_TRACKING_URI"]
HEADERS = {"Authorization": f"Bearer {os.environ.get('MLFLOW_TRACKING_TOKEN', '')}"}
client = MlflowClient()
_transcript = Transcript(scrub=lambda text: scrub(text))
transcript, ids, placeholder, record = _transcript.entries, _transcript.ids, _transcript.placeholder, _transcript.record


def scrub(text):
    """Replaces run and model ids anywhere, and experiment ids where they stand as a path segment."""
    for (kind, value), name in ids.items():
        if kind == "exp":
            text = re.sub(rf"(?<=[:/' ]){re.escape(value)}(?=/|'|$)", name, text)
        else:
            text = text.replace(value, name)
    return text


def rest(step, method, path, **kw):
    """A raw REST call, for requests the client would refuse before sending."""
    res = requests.request(method, f"{URI}/{path}", headers=HEADERS, timeout=60, **kw)
    try:
        payload = res.json()
    except ValueError:
        payload = {"body": res.text}
    transcript.append({"step": step, "status": res.status_code, "error": payload.get("error_code"), "message": scrub(payload.get("message", ""))})


def listing(files):
    return sorted([f.path, f.is_dir, f.file_size] for f in files)


def tree(root):
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8") as f:
                out[os.path.relpath(path, root)] = f.read()
    return dict(sorted(out.items()))


def model_view(m):
    return {
        "model_id": placeholder(m.model_id, "model"),
        "name": m.name,
        "experiment_id": placeholder(m.experiment_id, "exp"),
        "source_run_id": placeholder(m.source_run_id, "run") if m.source_run_id else None,
        "status": str(m.status),
        "artifact_location": scrub(m.artifact_location),
        "params": dict(sorted(m.params.items())),
        "tags": {k: v for k, v in sorted(m.tags.items()) if not k.startswith("mlflow.source.") and k != "mlflow.user"},
        "has_times": bool(m.creation_timestamp and m.last_updated_timestamp),
    }


class AddN(mlflow.pyfunc.PythonModel):
    def __init__(self, n):
        self.n = n

    def predict(self, context, model_input, params=None):
        return model_input.apply(lambda column: column + self.n)


def main():
    exp = mlflow.set_experiment("artifacts-exp")
    placeholder(exp.experiment_id, "exp")
    record("experiment artifact location", lambda: scrub(client.get_experiment(exp.experiment_id).artifact_location))
    work = tempfile.mkdtemp()
    with open(os.path.join(work, "notes.txt"), "w") as f:
        f.write("hello artifacts\n")
    bundle = os.path.join(work, "bundle")
    os.makedirs(os.path.join(bundle, "sub", "deeper"))
    for rel, text in [("a.txt", "A"), ("sub/b.txt", "BB"), ("sub/deeper/c.json", '{"c": 3}')]:
        with open(os.path.join(bundle, rel), "w") as f:
            f.write(text)

    with mlflow.start_run(run_name="art") as run:
        rid = run.info.run_id
        placeholder(rid, "run")
        record("run artifact uri", lambda: scrub(client.get_run(rid).info.artifact_uri))
        mlflow.log_artifact(os.path.join(work, "notes.txt"))
        mlflow.log_artifact(os.path.join(work, "notes.txt"), artifact_path="docs")
        mlflow.log_artifacts(bundle, artifact_path="bundle")
        mlflow.log_dict({"lr": 0.1, "layers": [1, 2]}, "config/params.json")
        mlflow.log_text("plain text", "texts/readme.md")
        record("list root", lambda: listing(client.list_artifacts(rid)))
        record("list nested dir", lambda: listing(client.list_artifacts(rid, "bundle/sub")))
        record("list a file path", lambda: listing(client.list_artifacts(rid, "notes.txt")))
        record("list missing dir", lambda: listing(client.list_artifacts(rid, "nothing-here")))
        record("download one file", lambda: open(client.download_artifacts(rid, "docs/notes.txt", tempfile.mkdtemp())).read())
        record("download a directory", lambda: tree(client.download_artifacts(rid, "bundle", tempfile.mkdtemp())))
        record("load_dict", lambda: mlflow.artifacts.load_dict(f"runs:/{rid}/config/params.json"))
        record("load_text", lambda: mlflow.artifacts.load_text(f"runs:/{rid}/texts/readme.md"))

        df = pd.DataFrame({"x": [1.0, 2.0, 3.0], "y": [0, 1, 0]})
        dataset = mlflow.data.from_pandas(df, source="https://example.com/data/train.csv", name="train-set", targets="y")
        mlflow.log_input(dataset, context="training", tags={"split": "train"})

    def inputs():
        run_inputs = client.get_run(rid).inputs
        return [
            {"name": d.dataset.name, "digest": d.dataset.digest, "source_type": d.dataset.source_type, "source": d.dataset.source,
             "schema": json.loads(d.dataset.schema), "profile": json.loads(d.dataset.profile),
             "tags": dict(sorted((t.key, t.value) for t in d.tags))}
            for d in run_inputs.dataset_inputs
        ]

    record("run inputs", inputs)

    rest("artifacts/list on a run", "GET", "api/2.0/mlflow/artifacts/list", params={"run_id": rid, "path": "bundle"})
    resp = requests.get(f"{URI}/api/2.0/mlflow/artifacts/list", params={"run_id": rid}, headers=HEADERS, timeout=60).json()
    record("artifacts/list root", lambda: {"root_uri": scrub(resp["root_uri"]), "files": sorted(json.dumps(f, sort_keys=True) for f in resp["files"])})
    proxied = f"api/2.0/mlflow-artifacts/artifacts/{exp.experiment_id}/{rid}/artifacts"
    record("proxy list", lambda: requests.get(f"{URI}/api/2.0/mlflow-artifacts/artifacts", params={"path": f"{exp.experiment_id}/{rid}/artifacts/bundle"}, headers=HEADERS, timeout=60).json())
    record("proxy get bytes", lambda: requests.get(f"{URI}/{proxied}/bundle/sub/b.txt", headers=HEADERS, timeout=60).text)
    rest("proxy delete", "DELETE", f"{proxied}/texts")
    record("listing after delete", lambda: listing(client.list_artifacts(rid)))
    rest("proxy: parent path", "GET", "api/2.0/mlflow-artifacts/artifacts", params={"path": "../etc"})
    rest("proxy: absolute path", "GET", "api/2.0/mlflow-artifacts/artifacts", params={"path": "/etc"})
    rest("proxy: encoded parent upload", "PUT", "api/2.0/mlflow-artifacts/artifacts/x/%2E%2E/y.txt", data=b"z")
    rest("proxy: missing file", "GET", f"{proxied}/no-such-file.txt")
    rest("artifacts/list: unsafe path", "GET", "api/2.0/mlflow/artifacts/list", params={"run_id": rid, "path": "../x"})
    rest("artifacts/list: missing run", "GET", "api/2.0/mlflow/artifacts/list", params={"run_id": "f" * 32})
    record("log_artifact to a missing run", lambda: client.log_artifact("0" * 32, os.path.join(work, "notes.txt")))

    with mlflow.start_run(run_name="modelling") as run:
        mrid = run.info.run_id
        placeholder(mrid, "run")
        mlflow.log_param("n", "2")
        info = mlflow.pyfunc.log_model(name="adder", python_model=AddN(2), pip_requirements=["mlflow"], params={"n": "2"}, tags={"kind": "toy"})
    model_id = info.model_id
    placeholder(model_id, "model")
    record("model info", lambda: {"model_uri": scrub(info.model_uri), "name": info.name, "run_id": scrub(info.run_id or "")})
    record("get logged model", lambda: model_view(client.get_logged_model(model_id)))
    record("load and predict", lambda: mlflow.pyfunc.load_model(f"models:/{model_id}").predict(pd.DataFrame({"v": [1.0, 5.0]}))["v"].tolist())
    record("model artifacts", lambda: sorted(f.path for f in client.list_logged_model_artifacts(model_id)))
    client.set_logged_model_tags(model_id, {"stage": "candidate"})
    client.delete_logged_model_tag(model_id, "kind")
    record("tags after edits", lambda: model_view(client.get_logged_model(model_id))["tags"])
    record("run outputs", lambda: [scrub(o.model_id) for o in client.get_run(mrid).outputs.model_outputs])
    record("search logged models", lambda: [model_view(m)["name"] for m in client.search_logged_models(experiment_ids=[exp.experiment_id])])
    record("search logged models by name", lambda: [m.name for m in client.search_logged_models(experiment_ids=[exp.experiment_id], filter_string="name = 'adder'")])
    external = mlflow.create_external_model(name="external-one", model_type="agent")
    placeholder(external.model_id, "model")
    record("external model", lambda: model_view(client.get_logged_model(external.model_id)))
    client.finalize_logged_model(external.model_id, "FAILED")
    record("finalized external", lambda: model_view(client.get_logged_model(external.model_id))["status"])
    client.delete_logged_model(external.model_id)
    record("deleted model is gone", lambda: client.get_logged_model(external.model_id))
    record("search after delete", lambda: sorted(m.name for m in client.search_logged_models(experiment_ids=[exp.experiment_id])))
    record("missing logged model", lambda: client.get_logged_model("m-" + "0" * 32))

    _transcript.write()


if __name__ == "__main__":
    main()
