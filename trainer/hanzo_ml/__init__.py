"""hanzo-ml: the trainer every training, evaluation, merge and token-count job runs, and the tracking client.

The trainer takes one job spec in (JSON, validated against contracts/generated/trainer-job.schema.json), writes
files out and metrics to the tracking API; see `python -m hanzo_ml --help`. The client (`hanzo_ml.client`,
re-exported here; standard library only, so `import hanzo_ml` never imports torch) logs runs from any script:

    import hanzo_ml
    hanzo_ml.set_tracking_uri("http://127.0.0.1:8057")
    hanzo_ml.set_experiment("my-finetune")
    with hanzo_ml.start_run(run_name="lr2e5") as run:
        run.log_params({"learning_rate": 2e-5})
        run.log_metrics({"train/loss": 0.34}, step=100)
"""
from hanzo_ml.client import (
    Experiment,
    Run,
    TrackingError,
    active_run,
    end_run,
    get_tracking_uri,
    log_artifact,
    log_metric,
    log_metrics,
    log_param,
    log_params,
    register_model,
    set_experiment,
    set_status,
    set_tracking_uri,
    start_run,
)

__version__ = "0.1.0"
__all__ = ["Experiment", "Run", "TrackingError", "active_run", "end_run", "get_tracking_uri", "log_artifact",
           "log_metric", "log_metrics", "log_param", "log_params", "register_model", "set_experiment",
           "set_status", "set_tracking_uri", "start_run", "__version__"]
