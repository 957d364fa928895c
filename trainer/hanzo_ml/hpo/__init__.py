"""Hyperparameter search: stateless suggestions from Optuna's samplers (see suggest.py)."""
