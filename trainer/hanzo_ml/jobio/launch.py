"""The child's command line, and which node of the job this runner is.

    trainer, 1 process      python -m hanzo_ml <kind> --spec {scratch}/spec.json [--workdir {scratch}/work]
    trainer, N processes    python -m torch.distributed.run --standalone --nproc-per-node=N -m hanzo_ml ...
    trainer, M nodes        python -m torch.distributed.run --nnodes=M --node-rank=R --master-addr=A
                                --master-port=P --nproc-per-node=N -m hanzo_ml ...
    candle                  $HANZO_ML_CANDLE (else hanzo-ml-candle on PATH) <args, {field} -> local path>
    command                 <args> as given, with spec.env added to the environment (a submitted command job)

A job of M nodes runs one runner per node (one pod each). The node's rank comes from HANZO_ML_NODE_RANK, else from
JOB_COMPLETION_INDEX (a Kubernetes Indexed Job sets it in each pod); node 0's address and port from
HANZO_ML_MASTER_ADDR and HANZO_ML_MASTER_PORT. A missing one is refused before anything is downloaded.
"""
from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import hanzo_ml
from hanzo_ml.errors import InputError
from hanzo_ml.jobio.envelope import PLACEHOLDER, Envelope
from hanzo_ml.jobio.scratch import Scratch


@dataclass(frozen=True)
class Node:
    rank: int
    master_addr: str | None = None
    master_port: int | None = None

    @property
    def leader(self) -> bool:
        """Node 0 writes progress, failure, result and checkpoints; the others only their own log."""
        return self.rank == 0


def node_of(envelope: Envelope, env: Mapping[str, str]) -> Node:
    if envelope.num_nodes == 1:
        return Node(rank=0)
    raw_rank = env.get("HANZO_ML_NODE_RANK") or env.get("JOB_COMPLETION_INDEX")
    if not raw_rank:
        raise InputError(f"HANZO_ML_NODE_RANK: not set (nor JOB_COMPLETION_INDEX); a job of {envelope.num_nodes} "
                         "nodes needs this node's rank")
    if not raw_rank.isdigit() or int(raw_rank) >= envelope.num_nodes:
        raise InputError(f"HANZO_ML_NODE_RANK: {raw_rank!r} is not a node rank of a {envelope.num_nodes}-node job "
                         f"(0..{envelope.num_nodes - 1})")
    addr = env.get("HANZO_ML_MASTER_ADDR")
    if not addr:
        raise InputError("HANZO_ML_MASTER_ADDR: not set; a multi-node job needs node 0's address (torchrun's "
                         "rendezvous)")
    port = env.get("HANZO_ML_MASTER_PORT")
    if not port or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"HANZO_ML_MASTER_PORT: {'not set' if not port else repr(port) + ' is not a port'}; a "
                         "multi-node job needs node 0's port (torchrun's rendezvous)")
    return Node(rank=int(raw_rank), master_addr=addr, master_port=int(port))


def trainer_command(envelope: Envelope, scratch: Scratch, node: Node) -> list[str]:
    module = ["hanzo_ml", envelope.kind, "--spec", str(scratch.spec)]
    if envelope.kind == "train":
        module += ["--workdir", str(scratch.work)]
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    if envelope.num_nodes > 1:
        return [*torchrun, f"--nnodes={envelope.num_nodes}", f"--node-rank={node.rank}",
                f"--master-addr={node.master_addr}", f"--master-port={node.master_port}",
                f"--nproc-per-node={envelope.processes}", "-m", *module]
    if envelope.processes > 1:
        return [*torchrun, "--standalone", f"--nproc-per-node={envelope.processes}", "-m", *module]
    return [sys.executable, "-m", *module]


def candle_command(envelope: Envelope, spec: dict[str, Any], env: Mapping[str, str]) -> list[str]:
    binary = env.get("HANZO_ML_CANDLE") or shutil.which("hanzo-ml-candle", path=env.get("PATH"))
    if not binary:
        raise RuntimeError("the Candle tool: set HANZO_ML_CANDLE or put hanzo-ml-candle on PATH")
    return [binary, *(PLACEHOLDER.sub(lambda m: str(spec[m.group(1)]), arg) for arg in envelope.args)]


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """The runner's environment, with this trainer importable however the runner itself found it."""
    trainer_root = str(Path(hanzo_ml.__file__).resolve().parents[1])
    path = env.get("PYTHONPATH")
    # unbuffered: a line the trainer prints reaches job.log now, not when a 8 KB buffer fills or the process ends
    return {"PYTHONUNBUFFERED": "1", **env, "PYTHONPATH": trainer_root + (os.pathsep + path if path else "")}
