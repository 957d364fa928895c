"""Job specs: read, validate against the generated contract, fill defaults.

The JSON Schema is generated from contracts/trainer-job.ts (zod) and checked in; this module never restates the
contract, it only reads it. A bad spec raises InputError with one line naming the file and the field path:
`job.json: hyperparameters.learning_rate: -1 is less than or equal to the minimum of 0`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlparse

from hanzo_ml.errors import InputError

SCHEMA_FILE = "trainer-job.schema.json"


def contracts_dir() -> Path:
    override = os.environ.get("HANZO_ML_CONTRACTS_DIR")
    return Path(override) if override else Path(__file__).resolve().parents[2] / "contracts" / "generated"


def load_schema(name: str = SCHEMA_FILE) -> dict[str, Any]:
    path = contracts_dir() / name
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise RuntimeError(f"cannot read the job contract {path}: {e.strerror} "
                           "(set HANZO_ML_CONTRACTS_DIR to the contracts/generated directory)") from e


def schema_for_kind(schema: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The branch of the discriminated union whose `kind` is this constant."""
    for branch in schema.get("oneOf", [schema]):
        if branch.get("properties", {}).get("kind", {}).get("const") == kind:
            return branch
    return None


def load_spec(path: Path, expected_kind: str) -> SimpleNamespace:
    """The validated spec with defaults filled, as attributes (`spec.hyperparameters.learning_rate`)."""
    return validate_document(read_json(path), path, expected_kind)


def validate_document(document: dict[str, Any], path: Path, expected_kind: str) -> SimpleNamespace:
    """A spec already in memory (a rendered recipe template), checked exactly as a spec file is; `path` is
    the name error messages give it."""
    schema = load_schema()
    kinds = [b["properties"]["kind"]["const"] for b in schema.get("oneOf", [schema])]
    kind = document.get("kind")
    if kind not in kinds:
        raise InputError(f"{path}: kind: expected one of {', '.join(map(repr, kinds))}, got {json.dumps(kind)}")
    if kind != expected_kind:
        raise InputError(f"{path}: kind: this command runs '{expected_kind}' jobs, the spec is a '{kind}' job")
    branch = schema_for_kind(schema, kind)
    check_against_schema(document, branch, path)
    filled = with_defaults(document, branch)
    check_paths(filled, path)
    return to_namespace(filled, branch)


def read_json(path: Path) -> dict[str, Any]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"{path}: cannot read the job spec: {e.strerror}") from e
    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from e
    if not isinstance(document, dict):
        raise InputError(f"{path}: expected a JSON object")
    return document


def check_against_schema(document: dict[str, Any], schema: dict[str, Any], path: Path) -> None:
    import jsonschema

    format_checker = jsonschema.FormatChecker()
    format_checker.checks("uri", raises=ValueError)(is_absolute_uri)
    validator = jsonschema.Draft202012Validator(schema, format_checker=format_checker)
    error = jsonschema.exceptions.best_match(validator.iter_errors(document))
    if error is not None:
        field, message = describe_error(error)
        raise InputError(f"{path}: {field}: {message}")


def is_absolute_uri(value: object) -> bool:
    """zod's .url(): a scheme and a location. jsonschema checks `uri` only with an optional package installed."""
    if not isinstance(value, str):
        return True
    parsed = urlparse(value)
    if not (parsed.scheme and parsed.netloc):
        raise ValueError(f"{value!r} is not an absolute URL")
    return True


def describe_error(error) -> tuple[str, str]:
    """(dotted field path, message) where the path names the offending field itself, not its parent."""
    path = [str(p) if not isinstance(p, int) else f"[{p}]" for p in error.absolute_path]
    message = error.message
    if error.validator == "required":
        missing = [name for name in error.validator_value if name not in error.instance]
        path, message = path + [missing[0]], "is required"
    elif error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        path, message = path + [extra[0]], "is not a field of this job kind"
    elif error.validator == "format" and error.cause is not None:
        message = str(error.cause)
    dotted = ".".join(path).replace(".[", "[") or "(root)"
    return dotted, message


def with_defaults(value: Any, schema: dict[str, Any]) -> Any:
    """Fill the schema's `default`s for absent properties, recursively (jsonschema validates, never fills)."""
    if not isinstance(value, dict) or "properties" not in schema:
        return value
    filled = dict(value)
    for name, subschema in schema["properties"].items():
        if name not in filled and "default" in subschema:
            filled[name] = subschema["default"]
        if name in filled:
            filled[name] = with_defaults(filled[name], subschema)
    return filled


def check_paths(spec: dict[str, Any], path: Path) -> None:
    """Every `*_path` / `*_dir` field (and every value of `inputs`) is an absolute local path: a job runs in
    its own workspace, so a relative path would silently mean something else there."""
    candidates = [(k, v) for k, v in spec.items() if k.endswith(("_path", "_dir"))]
    candidates += [(f"inputs.{k}", v) for k, v in (spec.get("inputs") or {}).items()]
    for field, value in candidates:
        if value is not None and not os.path.isabs(value):
            raise InputError(f"{path}: {field}: expected an absolute local path, got {json.dumps(value)}")


def require_existing(spec_path: Path, field: str, value: str | None, kind: str = "file") -> None:
    """Inputs must exist before any model is loaded; the message names the field that points nowhere."""
    if value is None:
        return
    exists = os.path.isfile(value) if kind == "file" else os.path.isdir(value)
    if not exists:
        raise InputError(f"{spec_path}: {field}: no such {'file' if kind == 'file' else 'directory'}: {value}")


def to_namespace(value: Any, schema: dict[str, Any]) -> Any:
    """Objects with declared properties become namespaces; records (free-form maps) stay dicts."""
    if isinstance(value, dict) and "properties" in schema:
        return SimpleNamespace(**{k: to_namespace(v, schema["properties"].get(k, {})) for k, v in value.items()})
    return value


def to_dict(value: Any) -> Any:
    if isinstance(value, SimpleNamespace):
        return {k: to_dict(v) for k, v in vars(value).items()}
    return value
