"""The job's local scratch directory, and the mapping between it and the store.

    {scratch}/inputs/{field}/{name} an s3:// input, downloaded (a file, or a directory of every object under it),
                                    under the last name of its URI: a tool that reads its input's own name (Candle
                                    names a GGUF after the model directory) sees the name it would in place
    {scratch}/outputs/{field}       where the tool writes each output; uploaded to {job_uri}/outputs/{field}
    {scratch}/checkpoints/          the trainer's checkpoint_dir, mirrored to the checkpoints URI
    {scratch}/work/                 train's workdir: progress.json, result.json, failure.json; prepare-dataset's
                                    work_dir is work/prepare-dataset
    {scratch}/spec.json             the spec the tool reads, every input and output field a local path (an input
                                    field `sources.0.path` is the path inside the spec, spec.sources[0].path)
    {scratch}/job.log               the child's output and the runner's own log lines
"""
from __future__ import annotations

import copy
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Mapping

from hanzo_ml.errors import InputError
from hanzo_ml.files import atomic_write_json
from hanzo_ml.jobio.envelope import Envelope, Input, spec_place
from hanzo_ml.jobio.store import FileBackend, ObjectStore, is_temp_name, join

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommandFiles:
    """What the runner knows of a trainer command's spec paths beyond "an input" and "an output"."""
    # makes its dir outputs itself, whole or not at all, and refuses one that exists (a prepared dataset version
    # is never replaced): the runner does not make them first
    own_output_dirs: bool = False
    # the spec field of the directory for its temporary files (disk-backed dedup buckets): pointed into the
    # scratch, as train gets its --workdir
    scratch_field: str | None = None
    # outputs written only on bad input (exit 2): their absence after a success is no error
    bad_input_outputs: frozenset[str] = frozenset()


COMMAND_FILES = {"prepare-dataset": CommandFiles(True, "work_dir", frozenset({"issues_path"}))}


def command_files(envelope: Envelope) -> CommandFiles:
    return COMMAND_FILES.get(envelope.kind or "", CommandFiles())


def command_work_dir(envelope: Envelope, scratch: "Scratch") -> Path:
    """The directory a command's scratch field points at (prepare-dataset's work_dir, where it writes progress.json)."""
    return scratch.work / (envelope.kind or "tool")


@dataclass(frozen=True)
class Scratch:
    root: Path

    @property
    def inputs(self) -> Path:
        return self.root / "inputs"

    @property
    def outputs(self) -> Path:
        return self.root / "outputs"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def spec(self) -> Path:
        return self.root / "spec.json"

    @property
    def log(self) -> Path:
        return self.root / "job.log"


def open_scratch(given: Path | None, env: Mapping[str, str]) -> tuple[Scratch, bool]:
    """(scratch, whether the runner created it and so removes it at the end). Resolved, so that the paths the
    tool writes into its result (it may resolve them too) start with exactly this prefix."""
    chosen = given or (Path(env["HANZO_ML_SCRATCH"]) if env.get("HANZO_ML_SCRATCH") else None)
    if chosen is None:
        return Scratch(Path(tempfile.mkdtemp(prefix="hanzo-ml-job-")).resolve()), True
    chosen.mkdir(parents=True, exist_ok=True)
    return Scratch(chosen.resolve()), False


def build_spec(store: ObjectStore, envelope: Envelope, scratch: Scratch) -> dict[str, Any]:
    """The envelope's spec with every input, output and checkpoint field set to a local path (inputs
    downloaded first), written to spec.json."""
    spec = copy.deepcopy(envelope.spec)
    for field, source in envelope.inputs.items():
        name = source.uri.rstrip("/").rsplit("/", 1)[-1]
        holder, key = spec_place(spec, field)  # a dotted field was checked when the envelope was read
        holder[key] = str(materialise_input(store, envelope, field, source, scratch.inputs / field / name))
    scratch.outputs.mkdir(parents=True, exist_ok=True)
    for field, kind in envelope.outputs.items():
        spec[field] = str(scratch.outputs / field)
        # a tool may be told to write `{field}/name` into it (Candle's --out)
        if kind == "dir" and not command_files(envelope).own_output_dirs:
            (scratch.outputs / field).mkdir(exist_ok=True)
    if envelope.checkpoints:
        scratch.checkpoints.mkdir(parents=True, exist_ok=True)
        spec[envelope.checkpoints.field] = str(scratch.checkpoints)
    scratch_field = command_files(envelope).scratch_field
    if scratch_field is not None:
        spec[scratch_field] = str(command_work_dir(envelope, scratch))
    atomic_write_json(scratch.spec, spec)
    return spec


def materialise_input(store: ObjectStore, envelope: Envelope, field: str, source: Input, local: Path) -> Path:
    """file:// is read in place (the job then shares that disk on purpose); anything else is downloaded."""
    if source.uri.startswith("file://"):
        return FileBackend.path(source.uri)
    if source.kind == "file":
        try:
            store.get_file(source.uri, local)
        except FileNotFoundError:
            raise InputError(f"{envelope.uri}: inputs.{field}: no object at {source.uri}") from None
        return local
    objects = store.list(source.uri)
    if not objects:
        raise InputError(f"{envelope.uri}: inputs.{field}: no objects under {source.uri}/")
    for relative, size in sorted(objects.items()):
        target = local / safe_relative(relative, envelope, field)
        # Objects are immutable once written, so a file of the same size left by an earlier attempt in this
        # scratch is that object: a restarted job does not fetch a model of many GB again.
        if target.is_file() and target.stat().st_size == size:
            continue
        store.get_file(join(source.uri, relative), target)
    log.info("input %s: %d objects from %s", field, len(objects), source.uri)
    return local


def safe_relative(relative: str, envelope: Envelope, field: str) -> Path:
    parts = PurePosixPath(relative).parts
    if not parts or any(p in ("..", ".", "") for p in parts) or relative.startswith("/"):
        raise InputError(f"{envelope.uri}: inputs.{field}: object key {relative!r} is not a relative path")
    return Path(*parts)


def output_uri(envelope: Envelope, name: str) -> str:
    return join(envelope.job_uri, "outputs", name)


def upload_outputs(store: ObjectStore, envelope: Envelope, scratch: Scratch, require: bool) -> None:
    """Every output to {job_uri}/outputs/{field} (a dir as outputs/{field}/<relative path>). Also whatever
    else the tool wrote at the top of outputs/ (merge writes heldout-tokens.json beside output_dir), so every
    local output path in the result has an object behind it. require: a declared output the tool did not
    write is an error (a tool that exited 0), else it is skipped (a Candle check that failed)."""
    for field in envelope.outputs:
        path = scratch.outputs / field
        if field in command_files(envelope).bad_input_outputs:
            continue
        if require and not (path.is_file() or (path.is_dir() and any(path.iterdir()))):
            raise RuntimeError(f"output {field}: the tool exited 0 but wrote nothing at {path}")
    if not scratch.outputs.is_dir():
        return
    for entry in sorted(scratch.outputs.iterdir()):
        if entry.name.startswith("."):  # a tool's temp file or directory, never a result
            continue
        if entry.is_dir():
            # a dir left by an earlier attempt may hold files this one no longer writes
            store.delete_prefix(output_uri(envelope, entry.name))
            files = sorted(p for p in entry.rglob("*") if p.is_file() and not left_behind(p.relative_to(entry)))
            for path in files:
                store.put_file(output_uri(envelope, f"{entry.name}/{path.relative_to(entry).as_posix()}"), path)
            log.info("output %s: %d files uploaded", entry.name, len(files))
        elif entry.is_file():
            store.put_file(output_uri(envelope, entry.name), entry)
            log.info("output %s uploaded", entry.name)


def left_behind(relative: Path) -> bool:
    """A half-written or replaced copy a killed attempt left in this scratch (the trainer's .tmp-/.old- names)."""
    return any(part.startswith((".tmp-", ".old-")) or is_temp_name(part) for part in relative.parts)


def rewrite_paths(value: Any, scratch: Scratch, envelope: Envelope) -> Any:
    """Every string that is a path under {scratch}/outputs becomes the URI it was uploaded to, recursively."""
    local = str(scratch.outputs)
    if isinstance(value, str) and (value == local or value.startswith(local + os.sep)):
        return join(envelope.job_uri, "outputs") + value[len(local):].replace(os.sep, "/")
    if isinstance(value, dict):
        return {k: rewrite_paths(v, scratch, envelope) for k, v in value.items()}
    if isinstance(value, list):
        return [rewrite_paths(v, scratch, envelope) for v in value]
    return value


def write_result(store: ObjectStore, envelope: Envelope, scratch: Scratch, document: Any) -> None:
    """result.json, paths rewritten; the caller writes it last, after every output is in the store."""
    text = json.dumps(rewrite_paths(document, scratch, envelope), indent=2, allow_nan=False) + "\n"
    store.write_text(join(envelope.job_uri, "result.json"), text)
