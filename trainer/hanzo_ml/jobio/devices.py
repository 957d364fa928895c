"""devices.json: the GPUs this node of the job was given, written once at start for the control plane.

On Kubernetes the device plugin's choice of GPUs is in no pod status the API server returns, so the job says it
itself: {"node": ..., "gpu_ids": [...]} with the UUIDs nvidia-smi lists inside the container (only the GPUs the
device plugin mounted), else the NVIDIA_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES values when they name devices,
else [] (a CPU job). Node 0 writes devices.json, node R > 0 devices-R.json (as job.log and job-R.log). The node is
HANZO_ML_NODE_NAME (the Kubernetes node, from the pod's spec.nodeName) when set, else the hostname.
"""
from __future__ import annotations

import json
import logging
import socket
from typing import Mapping

from hanzo_ml.gpu_telemetry import gpu_uuids
from hanzo_ml.jobio.launch import Node
from hanzo_ml.jobio.store import ObjectStore, join

log = logging.getLogger(__name__)

# Values of the *_VISIBLE_DEVICES variables that name no device: every GPU of the machine, or none at all.
NOT_DEVICE_LISTS = {"", "all", "void", "none"}


def visible_gpus(env: Mapping[str, str]) -> list[str]:
    uuids = gpu_uuids(env.get("PATH"))
    if uuids:
        return uuids
    for name in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        value = env.get(name, "").strip()
        if value.lower() not in NOT_DEVICE_LISTS:
            return [d.strip() for d in value.split(",") if d.strip()]
    return []


def devices_file(node: Node) -> str:
    return "devices.json" if node.leader else f"devices-{node.rank}.json"


def write_devices(store: ObjectStore, job_uri: str, node: Node, env: Mapping[str, str]) -> None:
    """Best effort: the placement then shows no GPUs, and the job runs on all the same."""
    document = {"node": env.get("HANZO_ML_NODE_NAME") or socket.gethostname(), "gpu_ids": visible_gpus(env)}
    try:
        store.write_text(join(job_uri, devices_file(node)), json.dumps(document))
    except Exception as e:  # noqa: BLE001
        log.warning("could not write %s: %s", devices_file(node), e)
