"""Streaming readers for every source format, each turning raw records into normalized Records.

Formats: jsonl, csv, parquet, arrow (IPC file or stream, Feather v2), text (a record per line or per file), a
HuggingFace `datasets` directory written by save_to_disk (its Arrow shards, read with pyarrow), a directory of
such files (sorted by name), and .gz / .zst of any file. Text formats are read line by line; columnar ones in
record batches, so no file is ever held in memory whole. Every problem goes to the IssueLog with the file, the
1-based line or row and the field; records keep (file, line) for the issues later stages find.
"""
from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import os
import shutil
import tempfile
import zlib
from pathlib import Path
from typing import Any, Iterator

import orjson

from hanzo_ml.dataprep.issues import IssueLog, single_issue
from hanzo_ml.dataprep.normalize import (NO_FORM, detect_form, mixed_forms_message, normalize,
                                         normalize_instruction, normalize_text)
from hanzo_ml.dataprep.records import Record

MAX_LINE_BYTES = 1 << 20    # as the upload: generous for one example, small enough to hold a few in memory
BATCH_ROWS = 1024           # columnar sources: rows per record batch
MAX_REPORTED_FIELDS = 64
EXTENSIONS = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet",
              ".arrow": "arrow", ".feather": "arrow", ".ipc": "arrow", ".txt": "text", ".text": "text",
              ".md": "text"}
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
CSV_COLUMNS = ("instruction", "input", "system", "response", "output")
OPTIONAL_CSV_COLUMNS = ("input", "system")


def decompression_errors() -> tuple[type[BaseException], ...]:
    import zstandard

    return (EOFError, gzip.BadGzipFile, zlib.error, zstandard.ZstdError)


class SourceSummary:
    """What the input looked like, across sources: the first record's form and the fields seen."""

    def __init__(self) -> None:
        self.form: str | None = None
        self.fields: list[str] = []
        self.records = 0

    def saw(self, form: str, keys) -> None:
        self.form = self.form or form
        for key in keys:
            if key not in self.fields and len(self.fields) < MAX_REPORTED_FIELDS:
                self.fields.append(key)


class FileForm:
    """The first record fixes a file's form; every later record must use the same one."""

    def __init__(self) -> None:
        self.form: str | None = None
        self.line = 0

    def accept(self, form: str, line: int) -> str | None:
        if self.form is None:
            self.form, self.line = form, line
            return None
        return None if form == self.form else mixed_forms_message(form, self.form, self.line)


# ---- resolving a spec source into files --------------------------------------------------------

def split_name(name: str) -> tuple[str, str | None]:
    """('x.jsonl', 'gzip') for x.jsonl.gz: the inner name and the compression."""
    stem, ext = os.path.splitext(name)
    compression = COMPRESSIONS.get(ext.lower())
    return (stem, compression) if compression else (name, None)


def detect_format(path: Path) -> str | None:
    if path.is_dir():
        return "hf-datasets" if is_hf_dir(path) else None
    inner, _ = split_name(path.name)
    return EXTENSIONS.get(os.path.splitext(inner)[1].lower())


def is_hf_dir(path: Path) -> bool:
    return any((path / name).is_file() for name in ("dataset_info.json", "state.json", "dataset_dict.json"))


def source_files(source) -> list[tuple[Path, str, str]]:
    """[(path, format, display name)] for one spec source: a file, an HF datasets directory or a directory."""
    path = Path(source.path)
    if not path.exists():
        raise single_issue(source.display_name, f"no such file or directory: {path}")
    if path.is_file() or is_hf_dir(path):
        fmt = source.format if source.format != "auto" else detect_format(path)
        if fmt is None:
            raise single_issue(source.display_name, unknown_format_message(path.name))
        return [(path, fmt, source.display_name)]
    files = []
    for member in sorted(p for p in path.iterdir() if not p.name.startswith(".")):
        fmt = source.format if source.format != "auto" else detect_format(member)
        name = f"{source.display_name}/{member.name}"
        if fmt is None:
            raise single_issue(name, unknown_format_message(member.name))
        files.append((member, fmt, name))
    if not files:
        raise single_issue(source.display_name, "directory holds no files")
    return files


def unknown_format_message(name: str) -> str:
    return (f"cannot tell the format of {name!r} from its name (expected .jsonl .json .csv .parquet .arrow "
            ".feather .txt, optionally .gz or .zst); give the source's format")


@contextlib.contextmanager
def open_binary(path: Path):
    """The file's bytes, decompressed as they are read when its name ends in .gz or .zst."""
    _, compression = split_name(path.name)
    if compression == "gzip":
        with gzip.open(path, "rb") as stream:
            yield stream
    elif compression == "zstd":
        import zstandard

        with open(path, "rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as reader:
            yield io.BufferedReader(reader, buffer_size=1 << 16)
    else:
        with open(path, "rb") as stream:
            yield stream


@contextlib.contextmanager
def seekable_copy(path: Path, work_dir: Path):
    """Columnar files need random access: a compressed one is decompressed into work_dir first (streamed)."""
    if split_name(path.name)[1] is None:
        yield path
        return
    fd, tmp = tempfile.mkstemp(dir=work_dir, suffix=".columnar")
    try:
        with os.fdopen(fd, "wb") as out, open_binary(path) as stream:
            shutil.copyfileobj(stream, out, 1 << 20)
        yield Path(tmp)
    finally:
        os.unlink(tmp)


# ---- the readers ----------------------------------------------------------------------------------

class SourceReader:
    """Reads every spec source in order, yielding normalized Records; problems go to `log`."""

    def __init__(self, sources, log: IssueLog, work_dir: Path):
        self.sources = sources
        self.log = log
        self.work_dir = work_dir
        self.summary = SourceSummary()

    def __iter__(self) -> Iterator[Record]:
        readers = {"jsonl": self.read_jsonl, "csv": self.read_csv, "parquet": self.read_parquet,
                   "arrow": self.read_arrow, "text": self.read_text, "hf-datasets": self.read_hf}
        for source in self.sources:
            for path, fmt, name in source_files(source):
                before = self.summary.records
                try:
                    yield from readers[fmt](path, name, source)
                except decompression_errors() as e:
                    self.log.add(name, None, None, f"cannot decompress {path.name}: {describe(e)}")
                if self.log.full:
                    return
                if self.summary.records == before and not self.log:
                    self.log.add(name, None, None, "file has no records")

    # -- shared by every format: a raw object -> a Record, or issues
    def from_object(self, value: dict[str, Any], name: str, number: int, source, form: FileForm,
                    text_field: str | None = None) -> Record | None:
        detected, problem = detect_form(value)
        if detected is None and text_field is not None and text_field in value:
            return self.from_text(value[text_field], name, number, source, text_field,
                                  extra={k: v for k, v in value.items() if k != text_field})
        if detected is None:
            hint = f', or a "{text_field}" column of plain text' if text_field is not None else ""
            self.log.add(name, number, None, problem + (hint if problem == NO_FORM else ""))
            return None
        mixed = form.accept(detected, number)
        if mixed:
            self.log.add(name, number, None, mixed)
            return None
        normalized, problems = normalize(detected, value)
        return self.emit(normalized, problems, name, number, source, detected, value)

    def from_text(self, text: Any, name: str, number: int, source, field: str | None,
                  extra: dict | None = None) -> Record | None:
        normalized, problems = normalize_text(text, field)
        return self.emit(normalized, problems, name, number, source, "text", extra or {})

    def emit(self, normalized, problems, name, number, source, form, fields) -> Record | None:
        if normalized is None:
            for field, message in problems:
                self.log.add(name, number, field, message)
            return None
        self.summary.saw(form, fields)
        self.summary.records += 1
        extra = {k: v for k, v in fields.items() if k not in FORM_KEYS} if isinstance(fields, dict) else {}
        return Record(normalized, name, number, source.display_name, extra=extra)

    # -- jsonl
    def read_jsonl(self, path: Path, name: str, source) -> Iterator[Record]:
        form = FileForm()
        with open_binary(path) as stream:
            for number, text, problem in decoded_lines(stream):
                if problem:
                    self.log.add(name, number, None, problem)
                elif text.strip():
                    value = self.parse_json(text, name, number)
                    record = value is not None and self.from_object(value, name, number, source, form)
                    if record:
                        yield record
                if self.log.full:
                    return

    def parse_json(self, text: str, name: str, number: int) -> dict | None:
        try:  # orjson accepts a subset of what the json module does (no NaN, no lone surrogate, 64-bit integers)
            value = orjson.loads(text)
        except orjson.JSONDecodeError:  # the json module decides, and words the problem
            value = None
        try:
            value = json.loads(text, parse_constant=reject_constant) if value is None else value
        except ValueError as e:
            detail = f"{e.msg} at column {e.colno}" if isinstance(e, json.JSONDecodeError) else str(e)
            self.log.add(name, number, None, f"invalid JSON: {detail}")
            return None
        if not isinstance(value, dict):
            self.log.add(name, number, None, f"expected a JSON object, got {json_type(value)}")
            return None
        return value

    # -- csv
    def read_csv(self, path: Path, name: str, source) -> Iterator[Record]:
        csv.field_size_limit(MAX_LINE_BYTES)
        with open_binary(path) as stream:
            text = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")
            rows = csv.reader(text, strict=True)
            header: list[str] | None = None
            columns: dict[str, int] = {}
            end = 0
            while True:
                start = end + 1
                try:
                    row = next(rows)
                except StopIteration:
                    return
                except (csv.Error, UnicodeDecodeError) as e:
                    self.log.add(name, rows.line_num or start, None, f"not readable as CSV: {e}")
                    return  # past a broken quote the rest of the file cannot be trusted
                end = rows.line_num
                if not row:  # an empty line
                    continue
                if header is None:
                    header = [cell.strip() for cell in row]
                    columns = self.csv_columns(header, name, start, source)
                    if columns is None:
                        return
                    continue
                record = self.csv_row(row, header, columns, name, start, source)
                if record:
                    yield record
                if self.log.full:
                    return

    def csv_columns(self, header: list[str], name: str, line: int, source) -> dict[str, int] | None:
        columns: dict[str, int] = {}
        issues = len(self.log.issues)
        for index, column in enumerate(header):
            key = column.lower()
            if key in CSV_COLUMNS or column == source.text_field:
                if key in columns:
                    self.log.add(name, line, column, "column appears more than once in the header row")
                columns.setdefault(key if key in CSV_COLUMNS else "\0text", index)
        if "instruction" not in columns and "\0text" in columns:
            return columns  # plain text, one record per row
        if "instruction" not in columns:
            self.log.add(name, line, None, 'missing required column "instruction"')
        if "response" not in columns and "output" not in columns:
            self.log.add(name, line, None, 'missing required column "response" (or its alias "output")')
        if "response" in columns and "output" in columns:
            self.log.add(name, line, "output", '"output" is an alias of "response"; keep one of the two columns')
        return None if len(self.log.issues) > issues else columns

    def csv_row(self, row: list[str], header: list[str], columns: dict[str, int], name: str, line: int,
                source) -> Record | None:
        # As the upload's CSV parser: a line break inside quotes is "\n" whatever the file used.
        row = [cell.replace("\r\n", "\n") for cell in row]
        if len(row) != len(header):
            self.log.add(name, line, None, f"expected {len(header)} fields as in the header row, got {len(row)} "
                                           "(check commas and quotes)")
            return None
        if "instruction" not in columns:
            return self.from_text(row[columns["\0text"]], name, line, source, header[columns["\0text"]])
        value = {key: row[i] for key, i in columns.items()
                 if key != "\0text" and not (row[i] == "" and key in OPTIONAL_CSV_COLUMNS)}
        normalized, problems = normalize_instruction(value)
        by_key = {key: header[i] for key, i in columns.items()}
        problems = [(by_key.get(field, field), message) for field, message in problems]
        return self.emit(normalized, problems, name, line, source, "instruction", dict(zip(header, row)))

    # -- columnar: parquet, arrow, HuggingFace datasets
    def read_parquet(self, path: Path, name: str, source) -> Iterator[Record]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        with seekable_copy(path, self.work_dir) as local:
            try:
                batches = pq.ParquetFile(local).iter_batches(batch_size=BATCH_ROWS)
            except (pa.ArrowException, OSError) as e:
                self.log.add(name, None, None, f"not a readable Parquet file: {e}")
                return
            yield from self.read_batches(batches, name, source, "Parquet")

    def read_arrow(self, path: Path, name: str, source) -> Iterator[Record]:
        with seekable_copy(path, self.work_dir) as local:
            batches = arrow_batches(local)
            if batches is None:
                self.log.add(name, None, None, "not an Arrow IPC file or stream (nor Feather v2)")
                return
            yield from self.read_batches(batches, name, source, "Arrow")

    def read_hf(self, path: Path, name: str, source) -> Iterator[Record]:
        for shard, shard_name in hf_shards(path, name):
            yield from self.read_arrow(shard, shard_name, source)
            if self.log.full:
                return

    def read_batches(self, batches, name: str, source, kind: str) -> Iterator[Record]:
        import pyarrow as pa

        form = FileForm()
        row = 0
        try:
            for batch in batches:
                for value in batch.to_pylist():
                    row += 1
                    # A null cell is a value not given, as an empty optional CSV cell.
                    present = {k: v for k, v in value.items() if v is not None}
                    record = self.from_object(present, name, row, source, form, text_field=source.text_field)
                    if record:
                        yield record
                    if self.log.full:
                        return
        except (pa.ArrowException, OSError) as e:
            self.log.add(name, row + 1, None, f"unreadable {kind} data after row {row}: {e}")

    # -- text
    def read_text(self, path: Path, name: str, source) -> Iterator[Record]:
        with open_binary(path) as stream:
            if source.text_unit == "file":
                record = self.read_text_file(stream, name, source)
                if record:
                    yield record
                return
            for number, text, problem in decoded_lines(stream):
                if problem:
                    self.log.add(name, number, None, problem)
                elif text.strip():
                    record = self.from_text(text, name, number, source, None)
                    if record:
                        yield record
                if self.log.full:
                    return

    def read_text_file(self, stream, name: str, source) -> Record | None:
        data = stream.read()
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            self.log.add(name, None, None, f"not UTF-8 text (invalid byte sequence at byte offset {e.start})")
            return None
        if "\0" in text:
            self.log.add(name, None, None, "not UTF-8 text (NUL byte)")
            return None
        if not text.strip():
            self.log.add(name, None, None, "expected non-empty text (the file is blank)")
            return None
        return self.from_text(text, name, 1, source, None)


FORM_KEYS = {"messages", "instruction", "input", "response", "output", "system", "prompt", "chosen", "rejected"}


def reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, list):
        return "array"
    if isinstance(value, bool):
        return "boolean"
    return "number" if isinstance(value, (int, float)) else "string"


def describe(e: BaseException) -> str:
    if isinstance(e, EOFError):
        return "the compressed stream ends early (truncated file)"
    return str(e) or type(e).__name__


def decoded_lines(stream, max_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, str | None, str | None]]:
    """(1-based line, text, None) or (line, None, problem), as datasets/ingest/source-lines.ts splits and decodes:
    a BOM at the very start is skipped, CRLF is a line end, NUL bytes and invalid UTF-8 are problems, and an
    over-long line is counted and skipped as it streams past, never held."""
    number = 0
    first = True
    while True:
        chunk = stream.readline(max_bytes + 2)
        if not chunk:
            return
        number += 1
        if first and chunk.startswith(b"\xef\xbb\xbf"):
            chunk = chunk[3:]
        first = False
        if not chunk.endswith(b"\n") and len(chunk) > max_bytes:
            length = len(chunk)
            while chunk and not chunk.endswith(b"\n"):
                chunk = stream.readline(1 << 20)
                length += len(chunk)
            length -= 1 if chunk.endswith(b"\n") else 0
            yield number, None, f"line is {length} bytes, over the {max_bytes}-byte limit"
            continue
        chunk = chunk[:-1] if chunk.endswith(b"\n") else chunk
        chunk = chunk[:-1] if chunk.endswith(b"\r") else chunk
        nul = chunk.find(b"\0")
        if nul != -1:
            yield number, None, f"not UTF-8 text (NUL byte at byte offset {nul})"
            continue
        try:
            yield number, chunk.decode("utf-8"), None
        except UnicodeDecodeError:
            yield number, None, "not UTF-8 text (invalid byte sequence)"


def arrow_batches(path: Path):
    """Record batches of an Arrow IPC file (Feather v2) or stream, one at a time; None when it is neither."""
    import pyarrow as pa

    try:
        reader = pa.ipc.open_file(path)
        return (reader.get_batch(i) for i in range(reader.num_record_batches))
    except (pa.ArrowInvalid, OSError):
        pass
    try:
        return iter(pa.ipc.open_stream(pa.memory_map(str(path))))
    except (pa.ArrowInvalid, OSError):
        return None


def hf_shards(path: Path, name: str) -> list[tuple[Path, str]]:
    """The Arrow shards of a save_to_disk directory, in state.json order; a DatasetDict's splits in turn."""
    if (path / "dataset_dict.json").is_file():
        splits = read_json_file(path / "dataset_dict.json", name).get("splits", [])
        return [shard for split in splits for shard in hf_shards(path / split, f"{name}/{split}")]
    state = path / "state.json"
    if state.is_file():
        files = [f.get("filename") for f in read_json_file(state, name).get("_data_files", [])]
    else:
        files = sorted(p.name for p in path.glob("*.arrow"))
    if not files:
        raise single_issue(name, "a datasets directory without Arrow shards (state.json lists no _data_files)")
    missing = [f for f in files if not (path / f).is_file()]
    if missing:
        raise single_issue(name, f"state.json lists {missing[0]}, which is not in the directory")
    return [(path / f, f"{name}/{f}") for f in files]


def read_json_file(path: Path, name: str) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise single_issue(name, f"{path.name}: not readable JSON: {e}") from e
    if not isinstance(value, dict):
        raise single_issue(name, f"{path.name}: expected a JSON object")
    return value


__all__ = ["SourceReader", "decoded_lines", "open_binary"]
