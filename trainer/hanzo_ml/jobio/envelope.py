"""The job envelope (contracts/job-io.ts): read from the store, validated, defaults filled.

The shape is checked against contracts/generated/job-envelope.schema.json, generated from the zod schema, so this
module does not restate it; it adds the rules a schema cannot say (field names that become local path names, a
result field that is an output, placeholders that name a field). Every error is an InputError of one line that
names the envelope and the field: `file:///jobs/j1/envelope.json: inputs.train_path.kind: 'blob' is not one of
['file', 'dir']` (exit 2).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from hanzo_ml.errors import InputError
from hanzo_ml.jobio.store import ObjectStore
from hanzo_ml.spec import check_against_schema, load_schema, with_defaults

SCHEMA_FILE = "job-envelope.schema.json"
# A field name becomes a directory name under scratch and an object name under {job_uri}/outputs/.
FIELD_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
PLACEHOLDER = re.compile(r"\{([A-Za-z0-9_][A-Za-z0-9_.-]*)\}")


@dataclass(frozen=True)
class Input:
    uri: str
    kind: str  # 'file' | 'dir'


@dataclass(frozen=True)
class Checkpoints:
    field: str
    uri: str


@dataclass(frozen=True)
class Envelope:
    uri: str                      # where this envelope was read from (error messages name it)
    job_name: str
    job_uri: str
    tool: str                     # 'trainer' | 'candle' | 'command'
    spec: dict[str, Any]
    inputs: dict[str, Input]
    outputs: dict[str, str]       # field -> 'file' | 'dir'
    checkpoints: Checkpoints | None
    args: list[str]
    result_field: str | None
    processes: int
    num_nodes: int

    @property
    def kind(self) -> str | None:
        """The trainer command (train, eval, merge, count-tokens); None for the Candle tool."""
        return self.spec.get("kind") if self.tool == "trainer" else None


def load_envelope(store: ObjectStore, uri: str) -> Envelope:
    text = store.read_text(uri)
    if text is None:
        raise InputError(f"{uri}: no such object (the job envelope)")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{uri}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from e
    return parse_envelope(document, uri)


def parse_envelope(document: Any, uri: str) -> Envelope:
    if not isinstance(document, dict):
        raise InputError(f"{uri}: (root): expected a JSON object")
    schema = load_schema(SCHEMA_FILE)
    check_against_schema(document, schema, uri)
    filled = with_defaults(document, schema)
    checkpoints = filled["checkpoints"]
    envelope = Envelope(
        uri=uri, job_name=filled["job_name"], job_uri=filled["job_uri"].rstrip("/"), tool=filled["tool"],
        spec=dict(filled["spec"]),
        inputs={field: Input(i["uri"], i["kind"]) for field, i in filled["inputs"].items()},
        outputs=dict(filled["outputs"]),
        checkpoints=Checkpoints(checkpoints["field"], checkpoints["uri"].rstrip("/")) if checkpoints else None,
        args=list(filled["args"]), result_field=filled["result_field"], processes=filled["processes"],
        num_nodes=filled["num_nodes"])
    check_fields(envelope)
    check_tool(envelope)
    return envelope


def fail(envelope: Envelope, field: str, message: str) -> None:
    raise InputError(f"{envelope.uri}: {field}: {message}")


def check_fields(envelope: Envelope) -> None:
    """Input, output and checkpoint fields are distinct spec fields with names safe as path components."""
    named = [(f"inputs.{f}", f) for f in envelope.inputs] + [(f"outputs.{f}", f) for f in envelope.outputs]
    if envelope.checkpoints:
        named.append(("checkpoints.field", envelope.checkpoints.field))
    seen: dict[str, str] = {}
    for where, field in named:
        if not FIELD_NAME.match(field):
            fail(envelope, where, f"{json.dumps(field)} is not a usable field name (letters, digits, _ . -)")
        if field in seen:
            fail(envelope, where, f"{field} is already the field of {seen[field]}")
        seen[field] = where
    if envelope.result_field is not None and envelope.outputs.get(envelope.result_field) != "file":
        fail(envelope, "result_field", f"{envelope.result_field} is not an output of kind 'file'")
    for field in envelope.inputs:
        if "." in field:
            try:
                spec_place(envelope.spec, field)
            except ValueError as e:
                fail(envelope, f"inputs.{field}", str(e))


def spec_place(spec: dict[str, Any], field: str) -> tuple[Any, str | int]:
    """Where a dotted input field lands in the spec: `sources.0.path` is spec["sources"][0]["path"], so a job
    whose spec holds lists of paths (prepare-dataset's sources and parents) gets each of them fetched. Every
    step but the last must exist. Returns the object or list that holds the field and its key or index; a
    ValueError names the step that is missing."""
    parts = field.split(".")
    holder: Any = spec
    for depth, part in enumerate(parts):
        where = "spec." + ".".join(parts[:depth]) if depth else "spec"
        key: str | int = part
        if isinstance(holder, list):
            if not part.isdigit() or int(part) >= len(holder):
                raise ValueError(f"{where} has no item {part}")
            key = int(part)
        elif not isinstance(holder, dict):
            raise ValueError(f"{where} is neither an object nor a list")
        elif depth < len(parts) - 1 and part not in holder:
            raise ValueError(f"{where} has no field {part}")
        if depth == len(parts) - 1:
            return holder, key
        holder = holder[key]
    raise AssertionError("unreachable: a field has at least one part")


def check_tool(envelope: Envelope) -> None:
    if envelope.tool == "trainer":
        kind = envelope.spec.get("kind")
        if not isinstance(kind, str):
            fail(envelope, "spec.kind", "is required for the trainer (train, eval, merge, count-tokens)")
        if kind != "train" and envelope.result_field is None:
            fail(envelope, "result_field", f"is required for a {kind} job: the output field its report is written to")
        return
    if envelope.tool == "command":
        check_command(envelope)
        return
    # candle: one process, its result is the report on stdout, and its arguments name fields that exist
    if envelope.processes != 1 or envelope.num_nodes != 1:
        fail(envelope, "processes" if envelope.processes != 1 else "num_nodes", "the Candle tool runs one process")
    if envelope.result_field is not None:
        fail(envelope, "result_field", "must be null for the Candle tool (its result is the report on stdout)")
    if envelope.checkpoints is not None:
        fail(envelope, "checkpoints", "must be null for the Candle tool")
    if not envelope.args:
        fail(envelope, "args", "the Candle tool needs a subcommand and its arguments")
    known = set(envelope.spec) | set(envelope.inputs) | set(envelope.outputs)
    for index, arg in enumerate(envelope.args):
        for name in PLACEHOLDER.findall(arg):
            if name not in known:
                fail(envelope, f"args[{index}]", f"{{{name}}} names no spec, input or output field")


def check_command(envelope: Envelope) -> None:
    """A submitted command job: its argv, and an environment of names to strings; its result is its exit code."""
    if not envelope.args:
        fail(envelope, "args", "a command job needs its command")
    if envelope.result_field is not None:
        fail(envelope, "result_field", "must be null for a command job (its result is its exit code)")
    env = envelope.spec.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        fail(envelope, "spec.env", "expected an object of environment variable names to strings")
