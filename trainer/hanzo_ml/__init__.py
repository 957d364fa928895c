"""hanzo-ml trainer: the program every training, evaluation, merge and token-count job runs.

One job spec in (JSON, validated against contracts/generated/trainer-job.schema.json), files out, metrics to the
tracking API. See `python -m hanzo_ml --help`.
"""
__version__ = "0.1.0"
