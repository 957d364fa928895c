"""A Transformers `Trainer` with `report_to=["mlflow"]` (its MLflowCallback) trains a tiny model for a few CPU
steps; then the stock mlflow client reads the run back and this prints a normalized JSON transcript.

    HANZO_ML_MLFLOW_SITE=<mlflow venv site-packages> MLFLOW_TRACKING_URI=http://127.0.0.1:PORT \\
        MLFLOW_TRACKING_TOKEN=... <trainer venv python> hf_trainer.py transcript.json

Run once against the reference `mlflow server` and once against hanzo-ml: the transcripts must be equal.

The interpreter is the trainer venv's (torch, transformers); mlflow lives in the pinned mlflow client venv. Both
are built by scripts/bootstrap.sh from lock files, so nothing downloads here: the mlflow venv's site-packages is
appended to sys.path (site.addsitedir adds it after the trainer venv's own), so where both venvs hold a package the
trainer's copy wins. `check_shared_versions` refuses to run when a package both hold differs in version, except
those the tracking path exercised here (fluent API, async log-batch, MlflowClient reads) never imports.
"""

import os
import site
import sys
from importlib import metadata

# Packages mlflow's tracking client does not import, so the trainer venv's version may differ.
UNUSED_BY_TRACKING = {"pyarrow", "python-dateutil", "setuptools", "pip"}


def versions(path: str) -> dict[str, str]:
    return {d.metadata["Name"].lower().replace("_", "-"): d.version for d in metadata.distributions(path=[path])}


def check_shared_versions(mlflow_site: str) -> None:
    trainer = {}
    for path in site.getsitepackages():
        trainer.update(versions(path))
    clashes = {name: (trainer[name], v) for name, v in versions(mlflow_site).items()
               if name in trainer and trainer[name] != v and name not in UNUSED_BY_TRACKING}
    if clashes:
        raise SystemExit(f"the trainer and mlflow venvs hold different versions of {clashes}: "
                         "the shared interpreter would not be the one either lock file tested")


check_shared_versions(os.environ["HANZO_ML_MLFLOW_SITE"])
site.addsitedir(os.environ["HANZO_ML_MLFLOW_SITE"])

import json  # noqa: E402
import tempfile  # noqa: E402

import mlflow  # noqa: E402
import torch  # noqa: E402
from mlflow import MlflowClient  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments  # noqa: E402

EXPERIMENT = "hf-trainer-compat"
STEPS = 6
# Values that depend on the machine or the moment rather than on the tracking server.
VOLATILE_METRICS = {"train_runtime", "train_samples_per_second", "train_steps_per_second", "eval_runtime",
                    "eval_samples_per_second", "eval_steps_per_second", "total_flos"}


class TokenDataset(torch.utils.data.Dataset):
    """Fixed random token sequences; the labels are the inputs (causal language modelling)."""

    def __init__(self, n: int, seed: int):
        generator = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, 128, (n, 16), generator=generator)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def train(output_dir: str) -> None:
    torch.set_num_threads(1)  # the same losses on both servers' runs, to the tolerance the test compares with
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    args = TrainingArguments(output_dir=output_dir, run_name="hf-tiny", report_to=["mlflow"], max_steps=STEPS,
                             per_device_train_batch_size=4, per_device_eval_batch_size=4, logging_steps=1,
                             eval_strategy="steps", eval_steps=3, save_strategy="no", use_cpu=True, seed=0,
                             learning_rate=1e-3, disable_tqdm=True, dataloader_num_workers=0)
    trainer = Trainer(model=LlamaForCausalLM(config), args=args, train_dataset=TokenDataset(32, 1),
                      eval_dataset=TokenDataset(8, 2))
    trainer.train()


def transcript(output_dir: str) -> dict:
    client = MlflowClient()
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1, f"expected one run in {EXPERIMENT}, found {len(runs)}"
    run = runs[0]
    params = {k: v.replace(output_dir, "<output_dir>") for k, v in run.data.params.items()}
    history = {key: client.get_metric_history(run.info.run_id, key) for key in run.data.metrics}
    return {
        "run_name": run.info.run_name,
        "status": run.info.status,
        "lifecycle_stage": run.info.lifecycle_stage,
        "has_end_time": run.info.end_time is not None,
        "param_count": len(params),
        "params": dict(sorted(params.items())),
        "tags": {k: v for k, v in sorted(run.data.tags.items()) if not k.startswith("mlflow.source.")},
        "metric_steps": {k: sorted(m.step for m in points) for k, points in sorted(history.items())},
        "metric_values": {k: [m.value for m in sorted(points, key=lambda m: m.step)]
                          for k, points in sorted(history.items()) if k not in VOLATILE_METRICS},
    }


def main() -> None:
    os.environ["MLFLOW_EXPERIMENT_NAME"] = EXPERIMENT
    with tempfile.TemporaryDirectory() as output_dir:
        train(output_dir)
        mlflow.flush_async_logging()
        result = transcript(output_dir)
    with open(sys.argv[1], "w") as f:
        json.dump(result, f, indent=2, sort_keys=True)


if __name__ == "__main__":
    main()
