"""Versioned recipe templates (recipes/**/*.yaml at the repository root) rendered into train job specs.

    python -m hanzo_ml recipe recipes/tiny/lora.yaml --base-model DIR --train FILE [--validation FILE] \
        --workdir DIR [--out job.json]
    python -m hanzo_ml recipe recipes/zen-7b/lora.yaml --update-estimate

A template is (base model architecture, method, hyperparameters, hardware): its `job` block is a train job spec
without the paths and ids of one run, which rendering fills in; the result is validated against the generated
contract exactly as a spec file is. Its `estimate` block is what hanzo_ml.memory computes for it (memory per
device, largest micro-batch that fits, tokens, hours, cost); `--update-estimate` rewrites it and a test fails when
a template's numbers differ from the estimator's. Torch-free.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hanzo_ml.errors import InputError
from hanzo_ml.memory import GIB, estimate, shape_of
from hanzo_ml.spec import validate_document

TEMPLATE_FIELDS = ("name", "version", "model", "job", "estimate")
RUN_FIELDS = ("kind", "job_name", "run_id", "tracking_uri", "base_model_path", "train_path", "validation_path",
              "output_dir", "checkpoint_dir")


def read_template(path: Path) -> dict[str, Any]:
    import yaml

    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise InputError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from e
    if not isinstance(document, dict):
        raise InputError(f"{path}: expected a mapping with {', '.join(TEMPLATE_FIELDS)}")
    for name in TEMPLATE_FIELDS[:4]:
        if name not in document:
            raise InputError(f"{path}: {name}: is required")
    unknown = sorted(set(document) - set(TEMPLATE_FIELDS))
    if unknown:
        raise InputError(f"{path}: {unknown[0]}: is not a field of a recipe template")
    if not isinstance(document["job"], dict):
        raise InputError(f"{path}: job: expected a mapping (a train job spec without paths and ids)")
    for name in RUN_FIELDS:
        if name in document["job"]:
            raise InputError(f"{path}: job.{name}: set when the template is rendered, not in the template")
    return document


def render(template: dict[str, Any], base_model: str, train: str, validation: str | None, workdir: str,
           run_id: str | None = None) -> dict[str, Any]:
    """The job spec of one run of the template (a plain dict, as a spec file would hold)."""
    workdir = workdir.rstrip("/")
    run_id = run_id or hashlib.sha256(f"{template['name']}:{workdir}".encode()).hexdigest()[:32]
    return {"kind": "train", "job_name": f"{template['name']}-v{template['version']}", "run_id": run_id,
            "tracking_uri": None, "base_model_path": base_model, "train_path": train,
            "validation_path": validation, "output_dir": f"{workdir}/output",
            "checkpoint_dir": f"{workdir}/checkpoints", **template["job"]}


def validated(document: dict[str, Any], where: Path) -> SimpleNamespace:
    return validate_document(json.loads(json.dumps(document)), where, "train")


def placeholder_spec(template: dict[str, Any], where: Path) -> SimpleNamespace:
    """The template rendered with placeholder paths: what validation and estimates need (no files read)."""
    return validated(render(template, "/models/base", "/data/train.jsonl", "/data/validation.jsonl", "/work"), where)


def compute_estimate(template: dict[str, Any], where: Path) -> dict[str, Any]:
    spec = placeholder_spec(template, where)
    memory = spec.hardware.device_memory_gb
    result = estimate(spec, int(memory * GIB) if memory else None, shape_of(template["model"])).as_dict()
    return {"total_gib": round(result["total"] / GIB, 2), **result}


def update_estimate(path: Path) -> dict[str, Any]:
    """Rewrite the template's trailing `estimate:` block with the estimator's numbers, leaving the rest as is."""
    import yaml

    template = read_template(path)
    numbers = compute_estimate(template, path)
    text = Path(path).read_text(encoding="utf-8")
    comment = "# written by `python -m hanzo_ml recipe FILE --update-estimate` (hanzo_ml/memory.py); do not edit"
    head = re.split(r"(?m)^estimate:.*$", text)[0].rstrip("\n")
    head = head.removesuffix(comment).rstrip("\n")  # the block's own comment, written by an earlier update
    block = yaml.safe_dump({"estimate": numbers}, sort_keys=False, default_flow_style=False)
    Path(path).write_text(f"{head}\n\n{comment}\n{block}", encoding="utf-8")
    return numbers
