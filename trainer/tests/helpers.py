"""Helpers shared by the tests: datasets, job specs, running the CLI, contract checks."""
from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

TRAINER_DIR = Path(__file__).resolve().parents[1]
REPO_DIR = TRAINER_DIR.parent


def demo_records(count: int, seed: int = 0) -> list[dict]:
    """Routing-task records from the demo generator (short, realistic chat examples)."""
    from hanzo_ml.demo_data import task_records

    return task_records(random.Random(seed))[:count]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def train_spec(tmp_path: Path, base_dir: Path, files: dict[str, Path], **overrides) -> dict:
    hyperparameters = {
        "learning_rate": 5e-3, "max_steps": 6, "batch_size": 4, "gradient_accumulation_steps": 2,
        "warmup_steps": 2, "lora_rank": 4, "lora_alpha": 8, "max_seq_length": 192, "seed": 7,
    }
    hyperparameters.update(overrides.pop("hyperparameters", {}))
    spec = {
        "kind": "train", "job_name": "tiny-lora", "run_id": "0123456789abcdef0123456789abcdef",
        "tracking_uri": None, "base_model_path": str(base_dir), "train_path": str(files["train"]),
        "validation_path": str(files["validation"]), "output_dir": str(tmp_path / "output"),
        "checkpoint_dir": str(tmp_path / "checkpoints"), "method": "lora", "hyperparameters": hyperparameters,
        "checkpoint": {"every_steps": 2, "keep_last": 2}, "threads": 1,
    }
    spec.update(overrides)
    return spec


@contextlib.contextmanager
def recorded_losses(monkeypatch):
    """The train/loss of every optimizer step the trainer takes inside the block, in order (as each step's
    progress.json is written)."""
    import hanzo_ml.lora as loop

    losses: list[float] = []
    original = loop.write_progress

    def record(workdir, state, *args, **kwargs):
        original(workdir, state, *args, **kwargs)
        if state.step and len(losses) < state.step:
            losses.append(state.metrics["train/loss"])
    with monkeypatch.context() as patch:
        patch.setattr(loop, "write_progress", record)
        yield losses


def write_spec(path: Path, spec: dict) -> Path:
    path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
    return path


def load_spec_dict(spec: dict, tmp_path: Path):
    from hanzo_ml.spec import load_spec

    return load_spec(write_spec(tmp_path / f"{spec['kind']}-job.json", spec), spec["kind"])


def trainer_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(TRAINER_DIR) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_module(*args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hanzo_ml", *args], env=trainer_env(), capture_output=True,
                          text=True, timeout=timeout, **kwargs)


def read_json(path: Path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


def validate_against(schema_file: str, document) -> None:
    """Check a file we write against its generated contract schema."""
    import jsonschema

    from hanzo_ml.spec import load_schema

    jsonschema.Draft202012Validator(load_schema(schema_file)).validate(document)
