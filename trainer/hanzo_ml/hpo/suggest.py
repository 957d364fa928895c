"""Stateless suggestions: the next trial's hyperparameters from (search space, strategy, seed, history).

    python -m hanzo_ml hpo-suggest < request.json          one request on stdin, the response on stdout
    python -m hanzo_ml hpo-suggest --serve                 one request per stdin line, one response per line

Nothing is remembered between requests. Each request builds an in-memory Optuna study, replays the history
the sweep workflow carries (completed, pruned, failed and still-running trials, with the sampler's own
bookkeeping such as NSGA-II's generation) with `add_trial`, and asks. The sampler of trial n is seeded with
(seed, n), so a suggestion is a pure function of the seed, its trial number and the history: a worker that
dies loses no sampler state, and a replayed request gives the same answer.

Strategies: random (RandomSampler), bayesian (multivariate TPE with the constant liar for running trials),
evolutionary (NSGA-II over several objectives: a Pareto front, not a weighted sum), grid (the combinations in
a fixed order, skipping those already in the history).
"""
from __future__ import annotations

import json
import logging
import sys
from typing import Any

import optuna
from optuna.trial import TrialState, create_trial

from hanzo_ml.errors import InputError
from hanzo_ml.hpo.space import distributions, grid

log = logging.getLogger(__name__)

STRATEGIES = ("grid", "random", "bayesian", "evolutionary")
NSGA_POPULATION = 8  # small sweeps (tens of trials) still get several generations
STATES = {"running": TrialState.RUNNING, "completed": TrialState.COMPLETE, "pruned": TrialState.PRUNED,
          "failed": TrialState.FAIL, "cancelled": TrialState.FAIL}


def trial_seed(seed: int, n: int) -> int:
    return (seed * 1_000_003 + n) % 2**32


def sampler_for(strategy: str, seed: int) -> optuna.samplers.BaseSampler:
    if strategy == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if strategy == "bayesian":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True, n_startup_trials=10)
    return optuna.samplers.NSGAIISampler(seed=seed, population_size=NSGA_POPULATION)


def check_request(request: Any) -> None:
    if not isinstance(request, dict):
        raise InputError("request: expected a JSON object")
    for field in ("space", "strategy", "directions", "seed", "history", "numbers"):
        if field not in request:
            raise InputError(f"request.{field}: is required")
    if request["strategy"] not in STRATEGIES:
        raise InputError(f"request.strategy: expected one of {', '.join(STRATEGIES)}, got {request['strategy']!r}")
    directions = request["directions"]
    if not isinstance(directions, list) or not directions or any(d not in ("minimize", "maximize") for d in directions):
        raise InputError("request.directions: expected a non-empty list of 'minimize' / 'maximize'")
    if request["strategy"] == "evolutionary" and len(directions) < 2:
        raise InputError("request.directions: the evolutionary strategy needs two or more objectives")
    if not isinstance(request["seed"], int) or request["seed"] < 0:
        raise InputError("request.seed: expected a non-negative integer")
    numbers = request["numbers"]
    if not isinstance(numbers, list) or not numbers or not all(isinstance(n, int) and n >= 0 for n in numbers):
        raise InputError("request.numbers: expected a non-empty list of non-negative integer trial numbers")
    if not isinstance(request["history"], list):
        raise InputError("request.history: expected a list of trials")
    for i, entry in enumerate(request["history"]):
        if not isinstance(entry, dict):
            raise InputError(f"history[{i}]: expected a trial object, got {json.dumps(entry)}")


def frozen_trial(entry: dict, dists: dict, directions: list[str], index: int):
    """One history entry as an Optuna trial; the message names the entry that does not fit."""
    where = f"history[{index}]"
    state = STATES.get(entry.get("state"))
    if state is None:
        raise InputError(f"{where}.state: expected one of {', '.join(STATES)}, got {entry.get('state')!r}")
    params = entry.get("params")
    if not isinstance(params, dict) or set(params) != set(dists):
        raise InputError(f"{where}.params: expected exactly the parameters {sorted(dists)}, got {sorted(params or {})}")
    values = entry.get("values")
    if state == TrialState.COMPLETE and (not isinstance(values, list) or len(values) != len(directions)):
        raise InputError(f"{where}.values: a completed trial needs {len(directions)} objective value(s)")
    try:
        intermediate = {int(step): float(value) for step, value in entry.get("intermediate") or []}
    except (TypeError, ValueError) as e:
        raise InputError(f"{where}.intermediate: expected a list of [step, value] pairs ({e})") from e
    try:
        return create_trial(state=state, params=params, distributions=dists,
                            values=values if state == TrialState.COMPLETE else None,
                            intermediate_values=intermediate, system_attrs=entry.get("system_attrs") or {})
    except ValueError as e:
        raise InputError(f"{where}.params: {e}".replace("\n", " ")) from e


def suggest(request: dict) -> dict:
    check_request(request)
    dists = distributions(request["space"])
    history = request["history"]  # in the order given: earlier sweeps (warm start) first, then by trial number
    numbers = sorted(request["numbers"])
    if request["strategy"] == "grid":
        return suggest_grid(request["space"], history, numbers)
    directions = request["directions"]
    trials = [frozen_trial(entry, dists, directions, i) for i, entry in enumerate(history)]
    suggestions = []
    for n in numbers:
        study = optuna.create_study(directions=directions, sampler=sampler_for(request["strategy"],
                                                                              trial_seed(request["seed"], n)))
        for trial in trials:
            study.add_trial(trial)
        asked = study.ask(dists)
        system_attrs = dict(study.trials[asked.number].system_attrs)
        suggestions.append({"n": n, "params": asked.params, "system_attrs": system_attrs})
        # Later numbers in the same request see this one as running, as they would one request later.
        trials.append(create_trial(state=TrialState.RUNNING, params=asked.params, distributions=dists,
                                   system_attrs=system_attrs))
    return {"suggestions": suggestions, "exhausted": False}


def suggest_grid(space: dict, history: list[dict], numbers: list[int]) -> dict:
    key = lambda params: json.dumps(params, sort_keys=True)  # noqa: E731
    visited = {key(t.get("params")) for t in history}
    remaining = [point for point in grid(space) if key(point) not in visited]
    suggestions = [{"n": n, "params": point, "system_attrs": {}} for n, point in zip(numbers, remaining)]
    return {"suggestions": suggestions, "exhausted": len(remaining) <= len(numbers)}


def respond(line: str) -> dict:
    try:
        request = json.loads(line)
    except json.JSONDecodeError as e:
        return {"error": f"request: not valid JSON ({e.msg} at column {e.colno})"}
    try:
        return suggest(request)
    except InputError as e:
        return {"error": str(e)}


def serve(stdin=sys.stdin, stdout=sys.stdout) -> None:
    """Answers one request per line until stdin closes; a bad request gets {"error"} and the loop goes on."""
    for line in stdin:
        if line.strip():
            stdout.write(json.dumps(respond(line)) + "\n")
            stdout.flush()


def run(args) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if args.serve:
        serve()
        return
    response = respond(sys.stdin.read())
    if "error" in response:
        raise InputError(response["error"])
    sys.stdout.write(json.dumps(response) + "\n")
