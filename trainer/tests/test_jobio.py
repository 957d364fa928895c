"""The job runner (`python -m hanzo_ml job`): every file through the object store, nothing shared with the worker.

Real components only: file:// stores in temp dirs, a moto_server process for s3:// (from .bootstrap.json, written by
scripts/bootstrap.sh --tests), and the real trainer as the runner's child.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from hanzo_ml.errors import InputError
from hanzo_ml.jobio.envelope import parse_envelope
from hanzo_ml.jobio.launch import node_of, trainer_command
from hanzo_ml.jobio.scratch import Scratch, build_spec
from hanzo_ml.jobio.store import ObjectStore, join
from helpers import REPO_DIR, demo_records, train_spec, trainer_env, write_jsonl

MAX_STEPS = 16


# ---- servers and stores -------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_env():
    """A real S3-protocol server (moto_server) on a free loopback port, and the environment that points at it."""
    try:
        moto_server = json.loads((REPO_DIR / ".bootstrap.json").read_text())["moto_server"]
    except (OSError, KeyError, json.JSONDecodeError):
        moto_server = ""
    if not moto_server:
        pytest.skip("no moto_server in .bootstrap.json: run scripts/bootstrap.sh --tests to test s3:// jobs")
    port = free_port()
    server = subprocess.Popen([moto_server, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise RuntimeError(f"moto_server did not start on port {port}")
            time.sleep(0.1)
    yield {"HANZO_ML_STORAGE_ENDPOINT": f"http://127.0.0.1:{port}", "HANZO_ML_STORAGE_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    server.terminate()
    server.wait(timeout=10)


def s3_store(s3_env) -> ObjectStore:
    return ObjectStore({**os.environ, **s3_env})


def bucket() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"  # one per test: no test sees another's objects


@pytest.fixture(params=["file", "s3"])
def store_and_root(request, tmp_path) -> tuple[ObjectStore, str]:
    if request.param == "file":
        return ObjectStore(dict(os.environ)), (tmp_path / "objects").as_uri()
    return s3_store(request.getfixturevalue("s3_env")), f"s3://{bucket()}/root"


def run_job(envelope_uri: str, scratch: Path, env: dict | None = None, timeout: float = 240) \
        -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hanzo_ml", "job", "--envelope", envelope_uri, "--scratch",
                           str(scratch)], env={**trainer_env(), **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)


# ---- the store ----------------------------------------------------------------------------------------------

def test_the_store_round_trips_files_lists_recursively_and_deletes_by_prefix(store_and_root, tmp_path):
    store, root = store_and_root
    source = tmp_path / "source.bin"
    source.write_bytes(os.urandom(3000))
    store.put_file(join(root, "a/one.bin"), source)
    store.put_file(join(root, "a/deep/two.bin"), source)
    store.write_text(join(root, "a/doc.json"), '{"x": 1}\n')
    store.write_text(join(root, "b.json"), "{}\n")

    assert store.list(join(root, "a")) == {"one.bin": 3000, "deep/two.bin": 3000, "doc.json": 9}
    assert store.list(join(root, "nothing-here")) == {}
    store.get_file(join(root, "a/deep/two.bin"), tmp_path / "back" / "two.bin")
    assert (tmp_path / "back" / "two.bin").read_bytes() == source.read_bytes()
    assert [p.name for p in (tmp_path / "back").iterdir()] == ["two.bin"]  # no temp name left behind
    assert store.read_text(join(root, "a/doc.json")) == '{"x": 1}\n'
    assert store.read_text(join(root, "a/missing.json")) is None
    with pytest.raises(FileNotFoundError):
        store.get_file(join(root, "a/missing.bin"), tmp_path / "missing.bin")
    assert store.exists(join(root, "a/one.bin")) and not store.exists(join(root, "a/missing.bin"))

    store.delete(join(root, "a/one.bin"))
    store.delete(join(root, "a/one.bin"))  # absent: not an error
    assert set(store.list(join(root, "a"))) == {"deep/two.bin", "doc.json"}
    store.delete_prefix(join(root, "a"))
    assert store.list(join(root, "a")) == {} and store.exists(join(root, "b.json"))


def test_s3_objects_carry_their_sha256_as_metadata(s3_env, tmp_path):
    import hashlib

    store, name = s3_store(s3_env), bucket()
    source = tmp_path / "weights.bin"
    source.write_bytes(os.urandom(5000))
    store.put_file(f"s3://{name}/w/weights.bin", source)  # the bucket did not exist: created on first write
    store.read_text(f"s3://{name}/w/none")  # a read through the same client
    client = store._backend(f"s3://{name}/x").client
    head = client.head_object(Bucket=name, Key="w/weights.bin")
    assert head["Metadata"]["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()



@pytest.mark.parametrize("env,expected", [
    ({"HANZO_ML_STORAGE_ENCRYPTION": "sse-s3"}, {"ServerSideEncryption": "AES256"}),
    ({"HANZO_ML_STORAGE_ENCRYPTION": "sse-kms", "HANZO_ML_STORAGE_KMS_KEY_ID": "alias/hanzo-ml"},
     {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "alias/hanzo-ml"}),
])
def test_a_jobs_s3_writes_ask_for_the_configured_server_side_encryption(s3_env, tmp_path, env, expected):
    store, name = ObjectStore({**os.environ, **s3_env, **env}), bucket()
    source = tmp_path / "adapter.bin"
    source.write_bytes(os.urandom(3000))
    store.put_file(f"s3://{name}/a/adapter.bin", source)
    store.write_text(f"s3://{name}/a/result.json", "{}")
    client = store._backend(f"s3://{name}/x").client
    for key in ("a/adapter.bin", "a/result.json"):
        head = client.head_object(Bucket=name, Key=key)
        assert {k: head.get(k) for k in expected} == expected, key


def test_sse_kms_without_a_key_is_refused_before_anything_is_written(s3_env):
    with pytest.raises(ValueError, match="HANZO_ML_STORAGE_KMS_KEY_ID"):
        ObjectStore({**os.environ, **s3_env, "HANZO_ML_STORAGE_ENCRYPTION": "sse-kms"})._backend("s3://b/x")


# ---- the envelope -------------------------------------------------------------------------------------------

def envelope_doc(job_uri: str, **overrides) -> dict:
    doc = {"job_name": "tiny-job", "job_uri": job_uri, "tool": "trainer", "spec": {"kind": "train"}}
    doc.update(overrides)
    return doc


BAD_ENVELOPES = [
    ({"job_uri": None}, "job_uri"),
    ({"tool": "spark"}, "tool"),
    ({"job_name": "Not A DNS Label"}, "job_name"),
    ({"inputs": {"train_path": {"uri": "s3://b/train.jsonl", "kind": "blob"}}}, "inputs.train_path.kind"),
    ({"inputs": {"train_path": {"uri": "/local/train.jsonl", "kind": "file"}}}, "inputs.train_path.uri"),
    ({"outputs": {"output_dir": "dir"}, "result_field": "output_dir"}, "result_field"),
    ({"spec": {"kind": "eval"}, "outputs": {"output_path": "file"}}, "result_field"),
    ({"spec": {}}, "spec.kind"),
    ({"tool": "candle", "spec": {}, "args": ["validate", "--model", "{model_dir}"]}, "args[2]"),
    ({"inputs": {"x": {"uri": "s3://b/x", "kind": "file"}}, "outputs": {"x": "file"}}, "outputs.x"),
    ({"tool": "command", "spec": {}, "args": []}, "args"),
    ({"tool": "command", "spec": {"env": {"A": 1}}, "args": ["true"]}, "spec.env"),
]


@pytest.mark.parametrize("change, field", BAD_ENVELOPES, ids=[f for _, f in BAD_ENVELOPES])
def test_a_bad_envelope_exits_2_with_one_stderr_line_naming_the_field(tmp_path, change, field):
    doc = {**envelope_doc((tmp_path / "job").as_uri()), **change}
    doc = {k: v for k, v in doc.items() if v is not None}
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "envelope.json").write_text(json.dumps(doc))
    envelope_uri = (tmp_path / "job" / "envelope.json").as_uri()

    done = run_job(envelope_uri, tmp_path / "scratch", timeout=60)

    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"{envelope_uri}: {field}: "), lines[0]
    assert not (tmp_path / "scratch").exists()  # refused before anything was touched


def test_a_multi_node_job_without_its_rendezvous_address_exits_2_naming_the_variable(tmp_path):
    (tmp_path / "job").mkdir()
    doc = envelope_doc((tmp_path / "job").as_uri(), num_nodes=2, processes=2)
    (tmp_path / "job" / "envelope.json").write_text(json.dumps(doc))
    env = {"HANZO_ML_NODE_RANK": "1", "HANZO_ML_MASTER_ADDR": "", "HANZO_ML_MASTER_PORT": "29500"}

    done = run_job((tmp_path / "job" / "envelope.json").as_uri(), tmp_path / "scratch", env=env, timeout=60)

    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().startswith("HANZO_ML_MASTER_ADDR: not set"), done.stderr


def test_trainer_commands_run_under_torchrun_for_several_processes_and_nodes(tmp_path):
    scratch = Scratch(tmp_path)
    one = parse_envelope(envelope_doc("s3://b/j"), "e")
    assert trainer_command(one, scratch, node_of(one, {})) == [
        sys.executable, "-m", "hanzo_ml", "train", "--spec", str(tmp_path / "spec.json"),
        "--workdir", str(tmp_path / "work")]

    four = parse_envelope(envelope_doc("s3://b/j", processes=4, spec={"kind": "eval"},
                                       outputs={"output_path": "file"}, result_field="output_path"), "e")
    assert trainer_command(four, scratch, node_of(four, {})) == [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4", "-m", "hanzo_ml",
        "eval", "--spec", str(tmp_path / "spec.json")]

    nodes = parse_envelope(envelope_doc("s3://b/j", processes=2, num_nodes=3), "e")
    env = {"JOB_COMPLETION_INDEX": "2", "HANZO_ML_MASTER_ADDR": "job-0.svc", "HANZO_ML_MASTER_PORT": "29500"}
    node = node_of(nodes, env)
    assert (node.rank, node.leader) == (2, False)
    assert trainer_command(nodes, scratch, node)[3:9] == [
        "--nnodes=3", "--node-rank=2", "--master-addr=job-0.svc", "--master-port=29500", "--nproc-per-node=2", "-m"]
    with pytest.raises(InputError, match=r"^HANZO_ML_NODE_RANK: '3' is not a node rank"):
        node_of(nodes, {**env, "HANZO_ML_NODE_RANK": "3"})


# ---- inputs -------------------------------------------------------------------------------------------------

def test_s3_inputs_are_downloaded_to_scratch_and_the_spec_points_at_them(s3_env, tmp_path):
    store, name = s3_store(s3_env), bucket()
    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text('{"layers": 2}')
    (model / "sub" / "weights.bin").write_bytes(b"\x00" * 1000)
    for path in ("config.json", "sub/weights.bin"):
        store.put_file(f"s3://{name}/models/tiny/{path}", model / path)
    store.write_text(f"s3://{name}/data/train.jsonl", '{"messages": []}\n')
    local_validation = tmp_path / "validation.jsonl"
    local_validation.write_text("{}\n")
    envelope = parse_envelope(envelope_doc(f"s3://{name}/jobs/j", inputs={
        "base_model_path": {"uri": f"s3://{name}/models/tiny", "kind": "dir"},
        "train_path": {"uri": f"s3://{name}/data/train.jsonl", "kind": "file"},
        "validation_path": {"uri": local_validation.as_uri(), "kind": "file"},
    }, outputs={"output_dir": "dir"}, checkpoints={"field": "checkpoint_dir", "uri": f"s3://{name}/ckpt/r"},
        spec={"kind": "train", "run_id": "r", "base_model_path": "replaced"}), "e")
    scratch = Scratch(tmp_path / "scratch")

    spec = build_spec(store, envelope, scratch)

    # Under the input's own name, as a tool reading it in place would see it (Candle names a GGUF after it).
    assert spec["base_model_path"] == str(scratch.root / "inputs" / "base_model_path" / "tiny")
    assert (Path(spec["base_model_path"]) / "sub" / "weights.bin").read_bytes() == b"\x00" * 1000
    assert (Path(spec["base_model_path"]) / "config.json").read_text() == '{"layers": 2}'
    assert Path(spec["train_path"]).read_text() == '{"messages": []}\n'
    assert spec["train_path"] == str(scratch.root / "inputs" / "train_path" / "train.jsonl")
    assert spec["validation_path"] == str(local_validation)  # file:// is read in place
    assert spec["output_dir"] == str(scratch.root / "outputs" / "output_dir")
    assert spec["checkpoint_dir"] == str(scratch.root / "checkpoints")
    assert json.loads(scratch.spec.read_text()) == spec


def test_a_missing_s3_input_is_bad_input_naming_the_field(s3_env, tmp_path):
    store, name = s3_store(s3_env), bucket()
    envelope = parse_envelope(envelope_doc(f"s3://{name}/jobs/j", inputs={
        "train_path": {"uri": f"s3://{name}/data/none.jsonl", "kind": "file"}}), "env.json")
    with pytest.raises(InputError, match=r"^env.json: inputs.train_path: no object at s3://"):
        build_spec(store, envelope, Scratch(tmp_path / "scratch"))


# ---- a real train job through the runner: preempted, then resumed with a fresh scratch ---------------------

SLOW_STEPS_SITECUSTOMIZE = '''
"""Test stand-in loaded by the trainer the runner starts: each optimizer step of the real trainer takes
$STEP_DELAY_S seconds longer (as tests/slow_steps.py does), and after step $PAUSE_AT_STEP it waits (up to two
minutes) until SIGTERM has reached the trainer, so the test signals the runner mid-run however loaded the machine
is (a SIGTERM during the last step would find no step left to stop before)."""
import importlib.abc, importlib.util, os, signal, sys, time


def _sigterm_seen():
    handler = signal.getsignal(signal.SIGTERM)  # the trainer's PreemptionSignal._handle, once it is installed
    return bool(getattr(getattr(handler, "__self__", None), "requested", False))


class _SlowSteps(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "hanzo_ml.lora":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            write_progress = module.write_progress

            def write_progress_then_wait(workdir, state, *args, **kwargs):
                write_progress(workdir, state, *args, **kwargs)
                time.sleep(float(os.environ["STEP_DELAY_S"]))
                if state.step == int(os.environ.get("PAUSE_AT_STEP", "-1")):
                    deadline = time.monotonic() + 120
                    while not _sigterm_seen() and time.monotonic() < deadline:
                        time.sleep(0.05)

            module.write_progress = write_progress_then_wait

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("STEP_DELAY_S"):
    sys.meta_path.insert(0, _SlowSteps())
'''


def stored_steps(store: ObjectStore, uri: str) -> set[int]:
    """The steps with a manifest under the checkpoints URI."""
    return {int(p.split("/")[0]) for p in store.list(uri) if p.endswith("/manifest.json") and p[0].isdigit()}


def local_steps(checkpoint_dir: Path) -> set[int]:
    return {int(p.name[5:]) for p in checkpoint_dir.glob("step-*") if (p / "manifest.json").is_file()}


def local_progress_step(scratch: Path) -> int:
    try:
        return json.loads((scratch / "work" / "progress.json").read_text())["step"]
    except (FileNotFoundError, json.JSONDecodeError):
        return -1


def write_train_envelope(store: ObjectStore, name: str, base_dir: Path, root: Path) -> dict[str, str]:
    """The tiny model and data uploaded to s3, and an envelope that reads them from there."""
    records = demo_records(60)
    files = {"train": write_jsonl(root / "train.jsonl", records[:48]),
             "validation": write_jsonl(root / "validation.jsonl", records[48:])}
    for path in sorted(p for p in base_dir.rglob("*") if p.is_file()):
        store.put_file(f"s3://{name}/models/tiny/{path.relative_to(base_dir).as_posix()}", path)
    for split, path in files.items():
        store.put_file(f"s3://{name}/data/{split}.jsonl", path)
    spec = train_spec(root, base_dir, files, hyperparameters={"max_steps": MAX_STEPS},
                      checkpoint={"every_steps": 2, "keep_last": 2})
    for field in ("base_model_path", "train_path", "validation_path", "output_dir", "checkpoint_dir"):
        spec[field] = "/set/by/the/runner"
    uris = {"job": f"s3://{name}/jobs/tiny-lora", "checkpoints": f"s3://{name}/checkpoints/run-1"}
    store.write_text(join(uris["job"], "envelope.json"), json.dumps({
        "job_name": "tiny-lora", "job_uri": uris["job"], "tool": "trainer", "spec": spec,
        "inputs": {"base_model_path": {"uri": f"s3://{name}/models/tiny", "kind": "dir"},
                   "train_path": {"uri": f"s3://{name}/data/train.jsonl", "kind": "file"},
                   "validation_path": {"uri": f"s3://{name}/data/validation.jsonl", "kind": "file"}},
        "outputs": {"output_dir": "dir"},
        "checkpoints": {"field": "checkpoint_dir", "uri": uris["checkpoints"]}}))
    return uris


def preempt_mid_training(command: list[str], scratch: Path, env: dict, store: ObjectStore, uris: dict) -> dict:
    """Run the runner with slowed steps; SIGTERM it in the pause after step 7 (PAUSE_AT_STEP: the stand-in waits
    there for the signal), an odd step, so the trainer owes an emergency checkpoint (every_steps 2 wrote 2, 4, 6; keep_last 2 pruned 2 and 4). Meanwhile, watch what the
    store holds."""
    seen = {"steps": set(), "progress": set()}
    with open(scratch.with_suffix(".out"), "w+") as out, open(scratch.with_suffix(".err"), "w+") as err:
        runner = subprocess.Popen([*command, str(scratch)], stdout=out, stderr=err, env=env)
        deadline, next_look = time.monotonic() + 180, 0.0
        while not (local_progress_step(scratch) >= 7 and local_progress_step(scratch) % 2 == 1):
            if runner.poll() is not None or time.monotonic() > deadline:
                runner.kill()
                runner.wait()
                err.seek(0)
                raise AssertionError("the runner ended or hung before step 7: " + err.read()[-3000:])
            if time.monotonic() > next_look:
                seen["steps"] |= stored_steps(store, uris["checkpoints"])
                seen["progress"].add(json.loads(store.read_text(join(uris["job"], "progress.json")) or
                                                '{"step": -1}')["step"])
                next_look = time.monotonic() + 0.3
            time.sleep(0.03)
        runner.send_signal(signal.SIGTERM)
        runner.wait(timeout=120)
        out.seek(0)
        err.seek(0)
        return {"code": runner.returncode, "stdout": out.read(), "stderr": err.read(), "seen": seen,
                "local_steps": local_steps(scratch / "checkpoints"),
                "stored_steps": stored_steps(store, uris["checkpoints"]),
                "progress": json.loads(store.read_text(join(uris["job"], "progress.json"))),
                "failure": json.loads(store.read_text(join(uris["job"], "failure.json")) or "null")}


@pytest.fixture(scope="module")
def train_runs(s3_env, tiny_base_dir, tmp_path_factory) -> dict:
    """One envelope, run twice: SIGTERM to the runner mid-training, then again from a fresh scratch."""
    root = tmp_path_factory.mktemp("train-job")
    store = s3_store(s3_env)
    uris = write_train_envelope(store, bucket(), tiny_base_dir, root)
    slow = root / "slow-steps"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(SLOW_STEPS_SITECUSTOMIZE)
    env = {**trainer_env(), **s3_env}
    command = [sys.executable, "-m", "hanzo_ml", "job", "--envelope", join(uris["job"], "envelope.json"),
               "--scratch"]

    first = preempt_mid_training(command, root / "scratch-1", {
        **env, "STEP_DELAY_S": "0.6", "PAUSE_AT_STEP": "7", "PYTHONPATH": f"{slow}{os.pathsep}{env['PYTHONPATH']}"},
        store, uris)

    shutil.rmtree(root / "scratch-1")  # the second attempt: a new pod, nothing local
    done = subprocess.run([*command, str(root / "scratch-2")], capture_output=True, text=True, env=env,
                          timeout=240)
    second = {"code": done.returncode, "stdout": done.stdout, "stderr": done.stderr,
              "local_steps": local_steps(root / "scratch-2" / "checkpoints"),
              "stored_steps": stored_steps(store, uris["checkpoints"]),
              "result": json.loads(store.read_text(join(uris["job"], "result.json")) or "null"),
              "progress": json.loads(store.read_text(join(uris["job"], "progress.json"))),
              "failure": store.read_text(join(uris["job"], "failure.json")),
              "log": store.read_text(join(uris["job"], "job.log")) or "",
              "outputs": store.list(join(uris["job"], "outputs"))}
    return {"first": first, "second": second, "job_uri": uris["job"], "checkpoints_uri": uris["checkpoints"],
            "store": store}


@pytest.mark.slow  # a real trainer, twice (~30 s on 2 idle cores)
def test_sigterm_to_the_runner_mid_training_leaves_an_emergency_checkpoint_in_the_store_and_exits_143(train_runs):
    first = train_runs["first"]
    assert first["code"] == 143, first["stderr"][-3000:]
    step = first["progress"]["step"]
    assert 7 <= step < MAX_STEPS and step % 2 == 1  # every_steps 2: a checkpoint at an odd step is the emergency one
    assert first["progress"]["last_checkpoint"] == f"step-{step:08d}"
    assert step in first["stored_steps"]
    assert first["failure"]["kind"] == "preempted"
    assert "emergency checkpoint" in first["stdout"]  # the trainer's log, teed to the runner's stdout
    assert any(0 < s < step for s in first["seen"]["progress"])  # progress.json was copied up while it ran


@pytest.mark.slow  # a real trainer, twice (~30 s on 2 idle cores)
def test_the_stores_checkpoints_mirror_the_trainers_keep_last_pruning(train_runs):
    first, second = train_runs["first"], train_runs["second"]
    assert len(first["local_steps"]) == 2                      # keep_last 2
    assert first["stored_steps"] == first["local_steps"]       # what the trainer pruned is gone from the store
    assert first["seen"]["steps"] - first["stored_steps"]      # ... after it had been uploaded
    assert 2 not in first["stored_steps"]
    resumed = max(first["local_steps"])
    assert second["local_steps"] <= second["stored_steps"]
    assert resumed not in second["local_steps"] and resumed not in second["stored_steps"]  # seen, then pruned


@pytest.mark.slow  # a real trainer, twice (~30 s on 2 idle cores)
def test_a_rerun_with_a_fresh_scratch_resumes_from_the_newest_checkpoint_in_the_store(train_runs):
    first, second = train_runs["first"], train_runs["second"]
    resumed = max(first["stored_steps"])
    assert second["code"] == 0, second["stderr"][-3000:]
    assert second["result"]["resumed_from_step"] == resumed > 0
    assert second["result"]["steps_trained_this_process"] == MAX_STEPS - resumed
    assert f"resumed from step-{resumed:08d}" in second["log"]
    assert second["failure"] is None  # the first attempt's failure.json was cleared


@pytest.mark.slow  # a real trainer, twice (~30 s on 2 idle cores)
def test_a_finished_train_job_uploads_its_outputs_and_a_result_with_object_uris(train_runs):
    second, job_uri = train_runs["second"], train_runs["job_uri"]
    assert second["result"]["adapter_path"] == f"{job_uri}/outputs/output_dir/adapter"
    assert "output_dir/adapter/adapter_model.safetensors" in second["outputs"]
    assert second["progress"]["step"] == MAX_STEPS
    assert MAX_STEPS in second["stored_steps"]
    manifest = json.loads(train_runs["store"].read_text(f"{train_runs['checkpoints_uri']}/{MAX_STEPS}/manifest.json"))
    assert manifest["step"] == MAX_STEPS
    sizes = train_runs["store"].list(f"{train_runs['checkpoints_uri']}/{MAX_STEPS}")
    assert all(sizes[f["path"]] == f["size_bytes"] for f in manifest["files"])
    # one log across both attempts: the first attempt's lines, then the second's
    assert second["log"].index("emergency checkpoint") < second["log"].index("resumed from step-")
    assert "best/manifest.json" in train_runs["store"].list(train_runs["checkpoints_uri"])


# ---- the Candle tool's contract: a report on stdout is the result, whatever the exit code -----------------

CANDLE_STAND_IN = '''#!{python}
"""Test stand-in for hanzo-ml-candle: `quantize --model DIR --out FILE --json`. Writes FILE (into a directory it
does not create, as the real tool is given `{{gguf}}/model.gguf`), logs on stderr, and prints a JSON report whose
check failed (exit 1), or with STAND_IN_MODE=garbage no report at all."""
import json, os, sys

args = sys.argv[1:]
model, out = args[args.index("--model") + 1], args[args.index("--out") + 1]
print("stand-in: quantizing", model, file=sys.stderr, flush=True)
if os.environ.get("STAND_IN_MODE") == "garbage":
    print("this is not a report")
    sys.exit(1)
with open(out, "wb") as f:
    f.write(b"GGUF" + bytes(60))
print(json.dumps({{"ok": False, "command": "quantize", "model_dir": model, "outputs": [{{"path": out}}],
                  "error": "logits differ"}}))
sys.exit(1)
'''


@pytest.fixture
def candle_job(tmp_path) -> dict:
    tool = tmp_path / "hanzo-ml-candle-stand-in"
    tool.write_text(CANDLE_STAND_IN.format(python=sys.executable))
    tool.chmod(0o755)
    model = tmp_path / "merged"
    model.mkdir()
    (model / "config.json").write_text("{}")
    store, job_uri = ObjectStore(dict(os.environ)), (tmp_path / "objects" / "jobs" / "quantize-1").as_uri()
    store.write_text(join(job_uri, "result.json"), '{"stale": true}')  # an earlier attempt's
    store.write_text(join(job_uri, "envelope.json"), json.dumps({
        "job_name": "quantize-1", "job_uri": job_uri, "tool": "candle", "spec": {},
        "inputs": {"model_dir": {"uri": model.as_uri(), "kind": "dir"}}, "outputs": {"gguf": "dir"},
        "args": ["quantize", "--model", "{model_dir}", "--out", "{gguf}/model-q8_0.gguf", "--json"]}))
    return {"store": store, "job_uri": job_uri, "env": {"HANZO_ML_CANDLE": str(tool)}}


def test_a_candle_report_on_stdout_becomes_the_result_even_when_a_check_failed(candle_job, tmp_path):
    store, job_uri = candle_job["store"], candle_job["job_uri"]

    done = run_job(join(job_uri, "envelope.json"), tmp_path / "scratch", env=candle_job["env"], timeout=60)

    assert done.returncode == 0, done.stderr
    result = json.loads(store.read_text(join(job_uri, "result.json")))
    assert result["ok"] is False and result["error"] == "logits differ"
    assert result["outputs"] == [{"path": f"{job_uri}/outputs/gguf/model-q8_0.gguf"}]
    assert result["model_dir"] == str(tmp_path / "merged")  # an input read in place: not an output, not rewritten
    assert store.list(join(job_uri, "outputs")) == {"gguf/model-q8_0.gguf": 64}
    log = store.read_text(join(job_uri, "job.log"))
    assert "stand-in: quantizing" in log and "logits differ" not in log  # stderr logged; stdout is the report


def test_a_candle_run_without_a_report_exits_1_and_writes_no_result(candle_job, tmp_path):
    store, job_uri = candle_job["store"], candle_job["job_uri"]

    done = run_job(join(job_uri, "envelope.json"), tmp_path / "scratch",
                   env={**candle_job["env"], "STAND_IN_MODE": "garbage"}, timeout=60)

    assert done.returncode == 1, done.stderr
    assert store.read_text(join(job_uri, "result.json")) is None  # nor the stale one of an earlier attempt
    assert "printed no JSON report" in store.read_text(join(job_uri, "job.log"))


# ---- a submitted command job: its argv, its environment, its exit code ---------------------------------------

def command_job(tmp_path, script: str) -> tuple[ObjectStore, str]:
    store, job_uri = ObjectStore(dict(os.environ)), (tmp_path / "objects" / "jobs" / "command-1").as_uri()
    store.write_text(join(job_uri, "envelope.json"), json.dumps({
        "job_name": "command-1", "job_uri": job_uri, "tool": "command", "spec": {"env": {"USER_VALUE": "42"}},
        "args": [sys.executable, "-c", script]}))
    return store, job_uri


def test_a_command_job_runs_its_argv_with_its_env_and_its_result_is_its_exit_code(tmp_path):
    store, job_uri = command_job(tmp_path, "import os; print('value', os.environ['USER_VALUE'])")

    done = run_job(join(job_uri, "envelope.json"), tmp_path / "scratch", timeout=60)

    assert done.returncode == 0, done.stderr
    assert json.loads(store.read_text(join(job_uri, "result.json"))) == {"exit_code": 0}
    assert "value 42" in store.read_text(join(job_uri, "job.log"))


def test_a_failing_command_job_exits_with_its_code_and_writes_no_result(tmp_path):
    store, job_uri = command_job(tmp_path, "import sys; print('boom'); sys.exit(7)")

    done = run_job(join(job_uri, "envelope.json"), tmp_path / "scratch", timeout=60)

    assert done.returncode == 7, done.stderr
    assert store.read_text(join(job_uri, "result.json")) is None
    assert "boom" in store.read_text(join(job_uri, "job.log"))
