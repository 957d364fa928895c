"""A fixed MLflow model-registry scenario run with the stock mlflow client; writes a normalized JSON transcript.

    MLFLOW_TRACKING_URI=http://127.0.0.1:PORT MLFLOW_TRACKING_TOKEN=... python registry.py transcript.json

Run once against the reference `mlflow server` and once against hanzo-ml: the transcripts must be equal.
Server-chosen values (run ids, artifact locations, times) become placeholders. With REGISTRY_COMPAT_ARTIFACTS=1
the scenario ends by logging a model, registering it with mlflow.register_model and loading it back through
`models:/name@alias`, which needs the server's mlflow-artifacts proxy.
"""

import os
import tempfile
import warnings

import requests

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from transcript import Transcript

warnings.filterwarnings("ignore")

URI = os.environ["MLFLOW_TRACKING_URI"]
HEADERS = {"Authorization": f"Bearer {os.environ.get('MLFLOW_TRACKING_TOKEN', '')}"}
client = MlflowClient()
_transcript = Transcript(scrub=lambda text: scrub(text))
transcript, ids, placeholder, record = _transcript.entries, _transcript.ids, _transcript.placeholder, _transcript.record
artifact_roots = {}


def scrub(text):
    if not isinstance(text, str):
        return text
    for root, name in sorted(artifact_roots.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(root, name)
    for (_, value), name in sorted(ids.items(), key=lambda kv: -len(kv[0][1])):
        text = text.replace(value, name)
    return text


def version_view(mv):
    return {
        "name": mv.name,
        "version": mv.version,
        "stage": mv.current_stage,
        "status": mv.status,
        "description": mv.description,
        "source": scrub(mv.source),
        "run_id": scrub(mv.run_id),
        "tags": dict(sorted(mv.tags.items())),
        "aliases": sorted(mv.aliases),
        "has_times": mv.creation_timestamp is not None and mv.last_updated_timestamp is not None,
    }


def model_view(rm):
    return {
        "name": rm.name,
        "description": rm.description,
        "tags": dict(sorted(rm.tags.items())),
        "aliases": dict(sorted(rm.aliases.items())),
        "latest": sorted([[v.version, v.current_stage] for v in rm.latest_versions]),
        "has_times": rm.creation_timestamp is not None and rm.last_updated_timestamp is not None,
    }


def record_code(step, fn):
    """Like record, but keeps only the error code (for errors whose message carries backend detail)."""
    try:
        transcript.append({"step": step, "result": fn()})
    except MlflowException as e:
        transcript.append({"step": step, "error": e.error_code})


def rest(step, method, path, body):
    """A raw REST call, for requests the client would refuse before sending."""
    res = requests.request(method, f"{URI}/api/2.0/mlflow/{path}", json=body, headers=HEADERS, timeout=60)
    payload = res.json()
    transcript.append({"step": step, "status": res.status_code, "error": payload.get("error_code"), "message": scrub(payload.get("message", ""))})


def new_run(name):
    with mlflow.start_run(run_name=name) as run:
        mlflow.log_metric("loss", 0.5)
    placeholder(run.info.run_id, "run")
    artifact_roots[run.info.artifact_uri] = f"<artifacts of {placeholder(run.info.run_id, 'run')}>"
    return run.info


def registered_models(**kw):
    page = client.search_registered_models(**kw)
    return {"names": [m.name for m in page], "more": bool(page.token)}


def model_lifecycle():
    record("create model", lambda: model_view(client.create_registered_model("compat-model", tags={"team": "ml", "tmp": "x"}, description="first")))
    record("create duplicate model", lambda: client.create_registered_model("compat-model"))
    record("create model with a slash", lambda: client.create_registered_model("a/b"))
    rest("create model without a name", "POST", "registered-models/create", {})
    record("get missing model", lambda: client.get_registered_model("no-such-model"))
    record("update description", lambda: model_view(client.update_registered_model("compat-model", description="second")))
    client.set_registered_model_tag("compat-model", "owner", "alice")
    client.delete_registered_model_tag("compat-model", "tmp")
    record("tags after set and delete", lambda: model_view(client.get_registered_model("compat-model"))["tags"])
    record("tag on a missing model", lambda: client.set_registered_model_tag("no-such-model", "k", "v"))
    rest("tag with a bad key", "POST", "registered-models/set-tag", {"name": "compat-model", "key": "bad key!", "value": "v"})
    for name in ("compat-other", "zeta-model"):
        client.create_registered_model(name, tags={"team": "research" if name == "zeta-model" else "ml"})


def versions(alpha, beta):
    a_root, b_root = alpha.artifact_uri, beta.artifact_uri
    record("create version 1", lambda: version_view(client.create_model_version("compat-model", f"{a_root}/model", alpha.run_id, tags={"kind": "lora"}, description="v1")))
    record("create version 2", lambda: version_view(client.create_model_version("compat-model", f"{b_root}/model", beta.run_id, tags={"kind": "full"})))
    record("create version 3", lambda: version_view(client.create_model_version("compat-model", f"{a_root}/better", alpha.run_id, tags={"kind": "lora"})))
    record("version of a missing model", lambda: client.create_model_version("no-such-model", f"{a_root}/model", alpha.run_id))
    record("source outside the run", lambda: client.create_model_version("compat-model", f"{b_root}/model", alpha.run_id))
    record("get version", lambda: version_view(client.get_model_version("compat-model", "1")))
    record("get missing version", lambda: client.get_model_version("compat-model", "9"))
    rest("get version that is not a number", "GET", "model-versions/get?name=compat-model&version=abc", None)
    record("update version description", lambda: version_view(client.update_model_version("compat-model", "2", description="second take")))
    client.set_model_version_tag("compat-model", "2", "reviewed", "yes")
    client.delete_model_version_tag("compat-model", "1", "kind")
    record("version tags", lambda: [version_view(client.get_model_version("compat-model", v))["tags"] for v in ("1", "2")])
    record("tag on a missing version", lambda: client.set_model_version_tag("compat-model", "9", "k", "v"))
    record("download uri", lambda: scrub(client.get_model_version_download_uri("compat-model", "3")))


def aliases():
    client.set_registered_model_alias("compat-model", "champion", "2")
    client.set_registered_model_alias("compat-model", "challenger", "3")
    record("version by alias", lambda: version_view(client.get_model_version_by_alias("compat-model", "champion")))
    record("latest alias", lambda: client.get_model_version_by_alias("compat-model", "latest").version)
    record("aliases on the model", lambda: model_view(client.get_registered_model("compat-model"))["aliases"])
    client.set_registered_model_alias("compat-model", "champion", "3")
    record("moved alias", lambda: version_view(client.get_model_version("compat-model", "3"))["aliases"])
    record("reserved alias", lambda: client.set_registered_model_alias("compat-model", "latest", "1"))
    record("version-like alias", lambda: client.set_registered_model_alias("compat-model", "v1", "1"))
    record("alias with a bad character", lambda: client.set_registered_model_alias("compat-model", "a.b", "1"))
    record("alias to a missing version", lambda: client.set_registered_model_alias("compat-model", "ghost", "9"))
    record("missing alias", lambda: client.get_model_version_by_alias("compat-model", "nobody"))
    client.delete_registered_model_alias("compat-model", "challenger")
    record("deleted alias", lambda: client.get_model_version_by_alias("compat-model", "challenger"))


def stages():
    stage = lambda v, s, archive=False: version_view(client.transition_model_version_stage("compat-model", v, s, archive_existing_versions=archive))["stage"]
    record("to staging", lambda: stage("1", "Staging"))
    record("to production", lambda: stage("2", "production"))
    record("to production archiving the previous", lambda: stage("3", "Production", True))
    record("stages after archiving", lambda: {v: client.get_model_version("compat-model", v).current_stage for v in ("1", "2", "3")})
    record("bad stage", lambda: stage("1", "Retired"))
    record("latest versions", lambda: sorted([v.version, v.current_stage] for v in client.get_latest_versions("compat-model")))
    record("latest production", lambda: [v.version for v in client.get_latest_versions("compat-model", stages=["Production"])])
    record("model shows latest per stage", lambda: model_view(client.get_registered_model("compat-model"))["latest"])


def searches(alpha):
    mv = lambda *a, **kw: [[v.name, v.version] for v in client.search_model_versions(*a, **kw)]
    record("versions of a model", lambda: mv("name = 'compat-model'"))
    record("versions by tag", lambda: mv("name = 'compat-model' AND tags.kind = 'lora'"))
    record("versions by run", lambda: mv(f"run_id = '{alpha.run_id}'", order_by=["version_number ASC"]))
    record("versions by number", lambda: mv("name = 'compat-model' AND version_number > 1", order_by=["version_number ASC"]))
    record("versions by name pattern", lambda: mv("name LIKE 'compat-%'", order_by=["version_number DESC"]))
    record("versions by run list", lambda: mv(f"run_id IN ('{alpha.run_id}')", order_by=["version_number ASC"]))

    def version_pages():
        out, token = [], None
        while True:
            page = client.search_model_versions("name = 'compat-model'", max_results=2, order_by=["version_number ASC"], page_token=token)
            out.append([v.version for v in page])
            token = page.token
            if not token:
                return out

    record("versions in pages", version_pages)
    record_code("versions with a bad order key", lambda: mv("name = 'compat-model'", order_by=["stage ASC"]))
    record("models by name pattern", lambda: registered_models(filter_string="name LIKE 'compat-%'"))
    record("models by tag", lambda: registered_models(filter_string="tags.team = 'ml'", order_by=["name DESC"]))
    record("models case-insensitively", lambda: registered_models(filter_string="name ILIKE 'ZETA%'"))
    record("models in pages", lambda: [registered_models(max_results=2), registered_models(max_results=3)])
    record("models with too many results", lambda: registered_models(max_results=5000))


def rename_and_delete(alpha):
    record("rename", lambda: client.rename_registered_model("compat-model", "compat-renamed") or model_view(client.get_registered_model("compat-renamed")))
    record("old name is gone", lambda: client.get_registered_model("compat-model"))
    record("versions follow the rename", lambda: [v.name for v in client.search_model_versions("name = 'compat-renamed'")])
    record("alias follows the rename", lambda: client.get_model_version_by_alias("compat-renamed", "champion").version)
    record_code("rename onto a taken name", lambda: client.rename_registered_model("compat-renamed", "zeta-model"))
    client.delete_model_version("compat-renamed", "3")
    record("deleted version", lambda: client.get_model_version("compat-renamed", "3"))
    record("alias of a deleted version", lambda: client.get_model_version_by_alias("compat-renamed", "champion"))
    record("numbers are not reused", lambda: client.create_model_version("compat-renamed", f"{alpha.artifact_uri}/model", alpha.run_id).version)
    client.delete_registered_model("compat-renamed")
    record("deleted model", lambda: client.get_registered_model("compat-renamed"))
    record("delete a missing model", lambda: client.delete_registered_model("compat-renamed"))
    record("models left", lambda: registered_models())


def register_and_load_through_artifact_proxy():
    """mlflow.register_model from a logged model and a load through `models:/name@alias`: needs mlflow-artifacts."""
    import mlflow.pyfunc

    class Doubler(mlflow.pyfunc.PythonModel):
        def predict(self, context, model_input):
            return [2 * x for x in model_input]

    with mlflow.start_run(run_name="logged"):
        info = mlflow.pyfunc.log_model(name="doubler", python_model=Doubler())
    # register_model waits while the server answers PENDING_REGISTRATION (a server may copy the files after it
    # answers; the reference registers them at once) and returns the version as created: its status of record
    # is what the server says once the client's wait is over.
    registered = mlflow.register_model(info.model_uri, "compat-logged")
    record("register model", lambda: {k: v for k, v in version_view(client.get_model_version(registered.name, registered.version)).items() if k in ("name", "version", "status")})
    client.set_registered_model_alias("compat-logged", "prod", "1")
    with tempfile.TemporaryDirectory() as tmp:
        record("load by alias", lambda: mlflow.pyfunc.load_model("models:/compat-logged@prod", dst_path=tmp).predict([1, 2, 3]))


def main():
    try:
        mlflow.set_experiment("registry-compat")
        alpha = new_run("alpha")
        beta = new_run("beta")
        model_lifecycle()
        versions(alpha, beta)
        aliases()
        stages()
        searches(alpha)
        rename_and_delete(alpha)
        if os.environ.get("REGISTRY_COMPAT_ARTIFACTS") == "1":
            register_and_load_through_artifact_proxy()
    finally:
        # Written even when a step the scenario relies on fails, so the transcripts show where they part.
        _transcript.write()


if __name__ == "__main__":
    main()
