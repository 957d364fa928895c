"""The sweep's search space (contracts/hpo.ts SearchSpaceSchema) as Optuna distributions and as a grid.

    learning_rate: {type: log_uniform, min: 1e-6, max: 1e-3}      -> FloatDistribution(log=True)
    warmup_ratio:  {type: uniform, min: 0, max: 0.1}              -> FloatDistribution
    lora_rank:     {type: int, min: 4, max: 64, step: 4}          -> IntDistribution
    lora_alpha:    {type: choice, values: [16, 32, 64]}           -> CategoricalDistribution
A bad entry raises InputError naming `space.<name>.<field>`.
"""
from __future__ import annotations

import itertools
import math
from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from hanzo_ml.errors import InputError

MAX_GRID_POINTS = 1_000_000  # the grid is enumerated in memory; beyond this it is not a grid search


def _number(spec: dict, name: str, field: str) -> float:
    value = spec.get(field)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"space.{name}.{field}: expected a finite number, got {value!r}")
    return value


def distribution(name: str, spec: Any) -> BaseDistribution:
    if not isinstance(spec, dict):
        raise InputError(f"space.{name}: expected an object with a type, got {spec!r}")
    kind = spec.get("type")
    if kind == "choice":
        values = spec.get("values")
        if not isinstance(values, list) or not values:
            raise InputError(f"space.{name}.values: expected a non-empty list")
        return CategoricalDistribution(values)
    if kind not in ("uniform", "log_uniform", "int"):
        raise InputError(f"space.{name}.type: expected one of uniform, log_uniform, int, choice; got {kind!r}")
    low, high = _number(spec, name, "min"), _number(spec, name, "max")
    if not low < high:
        raise InputError(f"space.{name}.max: must be greater than min ({low})")
    if kind == "int":
        step = spec.get("step", 1)
        if not isinstance(step, int) or isinstance(step, bool) or step < 1:
            raise InputError(f"space.{name}.step: expected a positive integer, got {step!r}")
        log = bool(spec.get("log", False))
        if log and step != 1:
            raise InputError(f"space.{name}.step: a log-scaled int parameter takes step 1")
        return IntDistribution(int(low), int(high), step=step, log=log)
    if kind == "log_uniform" and low <= 0:
        raise InputError(f"space.{name}.min: log_uniform needs min > 0, got {low}")
    return FloatDistribution(low, high, log=kind == "log_uniform")


def distributions(space: Any) -> dict[str, BaseDistribution]:
    if not isinstance(space, dict) or not space:
        raise InputError("space: expected a non-empty object of parameters")
    return {name: distribution(name, space[name]) for name in sorted(space)}


def grid_values(name: str, spec: dict) -> list:
    """The points grid search visits for one parameter."""
    kind = spec["type"]
    if kind == "choice":
        return list(spec["values"])
    if kind == "int":
        return list(range(int(spec["min"]), int(spec["max"]) + 1, int(spec.get("step", 1))))
    points = spec.get("points")
    if not isinstance(points, int) or points < 2:
        raise InputError(f"space.{name}.points: grid search over a continuous parameter needs points >= 2")
    low, high = float(spec["min"]), float(spec["max"])
    if kind == "log_uniform":
        ratio = (high / low) ** (1 / (points - 1))
        values = [low * ratio**i for i in range(points)]
    else:
        values = [low + (high - low) * i / (points - 1) for i in range(points)]
    values[-1] = high  # exact end point, free of rounding
    return values


def grid_axis_size(spec: dict) -> int:
    """How many points grid_values gives, without building them (an int range may be astronomically long)."""
    if spec["type"] == "choice":
        return len(spec["values"])
    if spec["type"] == "int":
        return len(range(int(spec["min"]), int(spec["max"]) + 1, int(spec.get("step", 1))))
    return spec.get("points") if isinstance(spec.get("points"), int) else 0


def grid(space: dict) -> list[dict]:
    """Every combination, in a fixed order (parameter names sorted, values in the order given)."""
    names = sorted(space)
    size = math.prod(grid_axis_size(space[name]) for name in names)
    if size > MAX_GRID_POINTS:
        raise InputError(f"space: the grid has {size} points, more than {MAX_GRID_POINTS}; use random or bayesian")
    axes = [grid_values(name, space[name]) for name in names]
    return [dict(zip(names, combo)) for combo in itertools.product(*axes)]
