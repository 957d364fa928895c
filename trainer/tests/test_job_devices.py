"""devices.json: the GPUs each node of a job was given, as its runner finds them at start.

This machine has no GPU: a stand-in `nvidia-smi` (a shell script on PATH) prints two UUIDs, as the real one does
inside a container the device plugin mounted two GPUs into. The store is file:// in a temp dir, and the first test
runs the real runner (`python -m hanzo_ml job`) on a command job.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hanzo_ml.jobio.devices import write_devices
from hanzo_ml.jobio.launch import Node
from hanzo_ml.jobio.store import ObjectStore, join
from helpers import trainer_env

UUIDS = ["GPU-5b2c0a8e-3f4d-9e1b-7c6a-2d8f0e4b1a93", "GPU-a1f3c7d2-8e5b-4a60-9b1c-3e7d2f6a8c05"]


def fake_nvidia_smi(directory: Path, exit_code: int = 0) -> Path:
    """An nvidia-smi that answers only the UUID query (anything else is an error, so a changed query fails)."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "nvidia-smi"
    lines = "\n".join(f"echo {u}" for u in UUIDS)
    script.write_text(f'#!/bin/sh\n[ "$*" = "--query-gpu=uuid --format=csv,noheader" ] || exit 9\n'
                      f"[ {exit_code} = 0 ] || exit {exit_code}\n{lines}\n")
    script.chmod(0o755)
    return directory


def read_devices(store: ObjectStore, job_uri: str, name: str = "devices.json") -> dict | None:
    text = store.read_text(join(job_uri, name))
    return None if text is None else json.loads(text)


def test_the_runner_writes_the_uuids_nvidia_smi_lists_to_devices_json_at_start(tmp_path):
    store, job_uri = ObjectStore(dict(os.environ)), (tmp_path / "objects" / "jobs" / "command-1").as_uri()
    store.write_text(join(job_uri, "envelope.json"), json.dumps({
        "job_name": "command-1", "job_uri": job_uri, "tool": "command", "spec": {},
        "args": [sys.executable, "-c", "pass"]}))
    env = {**trainer_env(), "PATH": f"{fake_nvidia_smi(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}",
           "HANZO_ML_NODE_NAME": "gpu-node-a", "NVIDIA_VISIBLE_DEVICES": "0"}

    done = subprocess.run([sys.executable, "-m", "hanzo_ml", "job", "--envelope", join(job_uri, "envelope.json"),
                           "--scratch", str(tmp_path / "scratch")], env=env, capture_output=True, text=True,
                          timeout=60)

    assert done.returncode == 0, done.stderr
    assert read_devices(store, job_uri) == {"node": "gpu-node-a", "gpu_ids": UUIDS}


@pytest.mark.parametrize("variables, expected", [
    ({"NVIDIA_VISIBLE_DEVICES": "GPU-x, GPU-y"}, ["GPU-x", "GPU-y"]),
    ({"NVIDIA_VISIBLE_DEVICES": "all", "CUDA_VISIBLE_DEVICES": "0,1"}, ["0", "1"]),
    ({"NVIDIA_VISIBLE_DEVICES": "void"}, []),
    ({"CUDA_VISIBLE_DEVICES": "none"}, []),
    ({}, []),
])
def test_without_nvidia_smi_the_visible_devices_variables_name_the_gpus_else_none(tmp_path, variables, expected):
    store, job_uri = ObjectStore(dict(os.environ)), (tmp_path / "objects" / "job").as_uri()
    (tmp_path / "empty").mkdir()

    write_devices(store, job_uri, Node(rank=0), {"PATH": str(tmp_path / "empty"), **variables})

    assert read_devices(store, job_uri) == {"node": socket.gethostname(), "gpu_ids": expected}


def test_a_failing_nvidia_smi_falls_back_to_the_environment(tmp_path):
    store, job_uri = ObjectStore(dict(os.environ)), (tmp_path / "objects" / "job").as_uri()
    env = {"PATH": str(fake_nvidia_smi(tmp_path / "bin", exit_code=6)), "CUDA_VISIBLE_DEVICES": "3"}

    write_devices(store, job_uri, Node(rank=0), env)

    assert read_devices(store, job_uri)["gpu_ids"] == ["3"]


def test_each_node_of_a_multi_node_job_writes_its_own_file(tmp_path):
    store, job_uri = ObjectStore(dict(os.environ)), (tmp_path / "objects" / "job").as_uri()
    env = {"PATH": str(fake_nvidia_smi(tmp_path / "bin")), "HANZO_ML_NODE_NAME": "gpu-node-c"}

    write_devices(store, job_uri, Node(rank=2, master_addr="job-0.svc", master_port=29500), env)

    assert read_devices(store, job_uri) is None
    assert read_devices(store, job_uri, "devices-2.json") == {"node": "gpu-node-c", "gpu_ids": UUIDS}
