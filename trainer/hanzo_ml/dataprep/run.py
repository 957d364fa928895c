"""The preparation pipeline of `python -m hanzo_ml prepare-dataset --spec JOB.json`:

    sources -> normalize -> operations in order -> split -> <split>.jsonl (canonical)
            -> tokenized/<split>.arrow (when a tokenize operation is given) -> token counts -> PrepareReport

Everything streams; what must see all records (exact dedup, the shuffle, the class counts) spills to work_dir.
output_dir appears only when complete: the files are written to a temporary sibling directory that is renamed
into place at the end, and removed on any failure. On bad input nothing is written there: the issues go to
issues_path and the job exits with code 2.
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import logging
import os
import resource
import secrets
import shutil
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

from hanzo_ml.dataprep.issues import IssueLog, PrepareInputError, single_issue
from hanzo_ml.dataprep.ops import Stage, build_stage, chunked
from hanzo_ml.dataprep.parallel import ordered_map
from hanzo_ml.dataprep.progress import reading_progress
from hanzo_ml.dataprep.records import Record
from hanzo_ml.dataprep.sources import SourceReader
from hanzo_ml.dataprep.split import SPLIT_NAMES, SplitSink
from hanzo_ml.dataprep.tokenized import TokenizedSplits, counting_worker, labelling_worker, write_tokenized
from hanzo_ml.errors import InputError
from hanzo_ml.files import atomic_write_json, fsync_tree, sha256_file
from hanzo_ml.spec import require_existing

log = logging.getLogger(__name__)

COUNT_CHUNK = 256
NOTHING_TO_DO = object()  # the result of a chunk a stage already counted (and tokenized): no worker is asked
GC_YOUNG = 100_000


class Context:
    """What the stages share: the spec's settings, the issue log, the tokenizer (loaded once, before the worker
    processes fork, so they inherit it), and the parents' records."""

    def __init__(self, spec, log_: IssueLog):
        self.spec = spec
        self.log = log_
        self.work_dir = Path(spec.work_dir)
        self.memory_budget_mb = spec.memory_budget_mb
        self.threads = spec.threads
        # A tokenize operation follows: whoever counts a record's tokens makes its tokenized rows in the same call.
        self.labelled = any(op["op"] == "tokenize" for op in getattr(spec, "operations", []))
        self._tokenizer = None

    def tokenizer(self):
        if self._tokenizer is None:
            from hanzo_ml.chat import load_tokenizer

            self._tokenizer = load_tokenizer(Path(self.spec.tokenizer_path))
        return self._tokenizer

    def parent_records(self) -> Iterator[Record]:
        sources = [SimpleNamespace(path=p, format="jsonl", display_name=f"parents[{i}] {Path(p).name}",
                                   text_unit="line", text_field="text") for i, p in enumerate(self.spec.parents)]
        return iter(SourceReader(sources, self.log, self.work_dir))


def with_item_defaults(spec):
    """The spec loader fills the defaults of objects; sources and operations are objects inside arrays (the
    operations a union), whose defaults are filled here from the same generated schema."""
    from hanzo_ml.spec import load_schema, schema_for_kind, with_defaults

    branch = schema_for_kind(load_schema(), "prepare-dataset")["properties"]
    source_schema = branch["sources"]["items"]
    spec.sources = [SimpleNamespace(**with_defaults(s, source_schema)) for s in spec.sources]
    options = branch["operations"]["items"]["anyOf"]
    by_op = {o["properties"]["op"]["const"]: o for o in options}
    spec.operations = [with_defaults(op, by_op[op["op"]]) for op in spec.operations]
    if spec.split is not None:  # nullable: a union the loader leaves as a plain dict
        split_schema = next(o for o in branch["split"]["anyOf"] if o.get("type") == "object")
        spec.split = with_defaults(spec.split, split_schema)
    return spec


def prepare_dataset(spec, spec_path: Path) -> dict:
    started = time.perf_counter()
    spec = with_item_defaults(spec)
    output_dir = Path(spec.output_dir)
    tmp = output_dir.with_name(f"{output_dir.name}.tmp-{secrets.token_hex(6)}")
    try:
        check_spec(spec, spec_path)
        Path(spec.work_dir).mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
        report = build(spec, tmp)
        fsync_tree(tmp)
        if output_dir.exists():  # made while this job ran
            raise single_issue(Path(spec_path).name, f"{output_dir} already exists (a prepared version is never "
                               "replaced)", field="output_dir")
        os.rename(tmp, output_dir)
    except InputError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        issues = e.issues if isinstance(e, PrepareInputError) else \
            [{"file": Path(spec_path).name, "record": None, "field": None, "message": str(e)}]
        atomic_write_json(Path(spec.issues_path), {"issues": issues})
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    report["seconds"] = round(time.perf_counter() - started, 3)
    report["peak_rss_mb"] = peak_rss_mb()
    atomic_write_json(Path(spec.report_path), report)
    log.info("prepared %d of %d records in %.1f s (peak RSS %.0f MB): %s", report["records_out"],
             report["records_in"], report["seconds"], report["peak_rss_mb"], output_dir)
    return report


def check_spec(spec, spec_path: Path) -> None:
    """Problems a look at the spec finds, before any record is read."""
    require_existing(spec_path, "tokenizer_path", spec.tokenizer_path, kind="dir")
    if Path(spec.output_dir).exists():
        raise single_issue(Path(spec_path).name, f"{spec.output_dir} already exists (a prepared version is never "
                           "replaced)", field="output_dir")
    if spec.split is not None:
        total = spec.split["train"] + spec.split["validation"] + spec.split["test"]
        if abs(total - 1) > 1e-6:
            raise single_issue(Path(spec_path).name, f"split ratios must sum to 1 (train + validation + test), "
                                                     f"got {total:g}", field="split")
    else:
        for source in spec.sources:
            if source.display_name not in spec.split_of:
                raise single_issue(source.display_name, "split is null, so every source needs its split in "
                                   "split_of (or give split ratios)", field="split_of")
    for i, parent in enumerate(spec.parents):
        require_existing(spec_path, f"parents[{i}]", parent)
    ops = [op["op"] for op in spec.operations]
    for i, op in enumerate(spec.operations):
        check_operation(op, f"operations[{i}]", Path(spec_path).name)
    if any(op.get("against_parents") for op in spec.operations) and not spec.parents:
        raise single_issue(Path(spec_path).name, "against_parents needs the earlier versions in parents",
                           field="parents")
    if "tokenize" in ops and ops.index("tokenize") != len(ops) - 1:
        raise single_issue(Path(spec_path).name, "tokenize must be the last operation (it reads the split files)",
                           field=f"operations[{ops.index('tokenize')}]")


def check_operation(op: dict, field: str, file: str) -> None:
    """The rules of contracts/data-prep.ts that its JSON Schema cannot say (zod refinements)."""
    low, high = op.get("min_tokens"), op.get("max_tokens")
    if op["op"] == "filter" and low is None and high is None and op.get("languages") is None:
        raise single_issue(file, "give at least one of min_tokens, max_tokens, languages", field=field)
    if op["op"] == "filter" and low is not None and high is not None and low > high:
        raise single_issue(file, "min_tokens must not exceed max_tokens", field=f"{field}.min_tokens")
    if op["op"] == "augment" and op.get("shuffle_seed") is None and op.get("oversample_minority") is None:
        raise single_issue(file, "give shuffle_seed or oversample_minority", field=field)


def build(spec, directory: Path) -> dict:
    issues = IssueLog(spec.max_errors)
    context = Context(spec, issues)
    operations = spec.operations
    stages: list[Stage] = []
    reader = SourceReader(spec.sources, issues, context.work_dir)
    tokenize = next((op for op in operations if op["op"] == "tokenize"), None)
    tokenizer_sha256 = sha256_file(Path(spec.tokenizer_path) / "tokenizer.json")
    rows = TokenizedSplits(directory, tokenize["max_length"], tokenizer_sha256) if tokenize is not None else None
    sink = SplitSink(directory, spec.split, spec.split["seed"] if spec.split is not None else 0,
                     dict(spec.split_of), rows)
    stack = contextlib.ExitStack()
    try:
        context.tokenizer()  # load before the workers fork, so each inherits it
        stack.enter_context(fewer_collections())
        stream: Iterator[Record] = valid_only(reading_progress(reader, spec), issues)
        for op in operations:
            if op["op"] != "tokenize":
                stages.append(build_stage(op, context))
                stream = stages[-1].run(stream)
        write_splits(stream, sink, issues, context)
        if issues:
            raise issues.error()
        if reader.summary.records == 0:
            raise single_issue(spec.sources[0].display_name, "the sources hold no records")
        files = sink.finish()
        written = rows.finish() if rows is not None else None
    finally:
        stack.close()
        sink.discard()
        if rows is not None:
            rows.close()
        for stage in stages:
            stage.close()
    if tokenize is not None and reader.summary.form == "preference":
        raise single_issue(spec.sources[0].display_name, "preference pairs are tokenized by the dpo/orpo trainer "
                           "itself; drop the tokenize operation", field="operations")
    if rows is not None and sink.moved:  # the rows of the moved record sit in its first split's file
        rows.discard()
        written = None
    return report(spec, context, reader, stages, directory, files, tokenize, tokenizer_sha256, written)


@contextlib.contextmanager
def fewer_collections():
    """The cyclic garbage collector, run every GC_YOUNG allocations instead of every 700, with what exists before
    the records flow (modules, the tokenizer) frozen out of its scans. The records and near dedup's unwritten batch
    are millions of small containers that hold no cycles; collecting among them at the default pace cost about a
    fifth of the main process's time. Cycles are still collected, later."""
    threshold = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG, threshold[1], threshold[2])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def valid_only(reader: SourceReader, issues: IssueLog) -> Iterator[Record]:
    """Once the input is known to be bad, records are still read (to report more issues) but not passed on."""
    for record in reader:
        if not issues:
            yield record


def write_splits(records: Iterator[Record], sink: SplitSink, issues: IssueLog, context: Context) -> None:
    """Each record into its split file, its tokens counted (count-tokens' way) by the worker processes while
    the main process reads on, and with a tokenize operation its tokenized rows made in the same batch call; a
    record a stage already counted (filter) is not counted again."""
    placed = placeable(records, sink, issues)
    if context.labelled:
        for chunk, examples in ordered_map(lambda: labelling_worker(context.tokenizer), chunked(placed, COUNT_CHUNK),
                                           context.threads, send=lambda chunk: [
                                               None if r.encoded is not None else r.conversation() for r in chunk],
                                           local=lambda chunk: NOTHING_TO_DO if all(
                                               r.encoded is not None for r in chunk) else None):
            for record, example in zip(chunk, () if examples is NOTHING_TO_DO else examples.unpack()):
                if example is not None:
                    record.encoded, record.tokens = example, len(example[0])
            for record in chunk:
                sink.add(record, record.tokens)
        return
    for chunk, counts in ordered_map(lambda: counting_worker(context.tokenizer), chunked(placed, COUNT_CHUNK),
                                     context.threads, send=lambda chunk: [
                                         record.line_json if record.tokens is None else None for record in chunk],
                                     local=lambda chunk: NOTHING_TO_DO if all(
                                         record.tokens is not None for record in chunk) else None):
        for i, record in enumerate(chunk):
            sink.add(record, record.tokens if counts is NOTHING_TO_DO or counts[i] is None else counts[i])


def placeable(records: Iterator[Record], sink: SplitSink, issues: IssueLog) -> Iterator[Record]:
    """Records that can go into a split: one kind of record per dataset, a split for every source."""
    preference: bool | None = None
    for record in records:
        if preference is None:
            preference = record.is_preference
        elif record.is_preference != preference:
            issues.add(record.file, record.line, None, "preference pairs and chat records cannot be mixed in one "
                                                       "dataset; prepare them separately")
            continue
        if sink.ratios is None and record.source not in sink.split_of:
            issues.add(record.file, record.line, None, f"no split for source {record.source!r} in split_of")
            continue
        yield record


def report(spec, context: Context, reader: SourceReader, stages: list[Stage], directory: Path,
           files: dict[str, dict], tokenize: dict | None, tokenizer_sha256: str, written: dict | None) -> dict:
    stage_reports = [s.report() for s in stages]
    tokenized = None
    if tokenize is not None:
        if written is None:
            tokenized, tokenize_report = tokenize_splits(spec, context, directory, files, tokenize, tokenizer_sha256)
        else:
            tokenized, tokenize_report = tokenized_report(tokenize, written)
        stage_reports.append(tokenize_report)
    version = hashlib.sha256("".join(files[name]["sha256"] for name in SPLIT_NAMES).encode()).hexdigest()
    return {
        "records_in": reader.summary.records,
        "records_out": sum(files[name]["records"] for name in SPLIT_NAMES),
        "schema": {"form": reader.summary.form, "fields": reader.summary.fields},
        "operations": order_like(stage_reports, spec.operations),
        "splits": files,
        "tokenized": tokenized,
        "tokenizer_sha256": tokenizer_sha256,
        "sha256": version,
        "peak_rss_mb": 0.0,  # filled in at the very end
        "seconds": 0.0,
    }


def tokenized_report(tokenize: dict, written: dict[str, dict]) -> tuple[dict, dict]:
    """The report's `tokenized` and the operation's report for rows written beside the split files (their
    seconds are spent in the workers, with the token counts, and not told apart)."""
    tokenized = {"max_length": tokenize["max_length"], "splits": written}
    rows = sum(s["rows"] for s in written.values())
    tokens = sum(s["tokens"] for s in written.values())
    return tokenized, {"op": "tokenize", "params": {"max_length": tokenize["max_length"]}, "records_in": rows,
                       "records_out": rows, "removed": 0, "added": 0, "details": {"tokens": tokens}, "seconds": 0.0}


def tokenize_splits(spec, context: Context, directory: Path, files: dict[str, dict], tokenize: dict,
                    tokenizer_sha256: str) -> tuple[dict, dict]:
    """tokenized/<split>.arrow for every split, read back from the split files (when the split moved a record
    after its rows were written): the report's `tokenized` and the operation's report. The pass tokenizes every
    record anyway, so it sets the split files' token counts too."""
    started = time.perf_counter()
    (directory / "tokenized").mkdir(exist_ok=True)
    tokenized: dict = {"max_length": tokenize["max_length"], "splits": {}}
    for name in SPLIT_NAMES:
        tokenized["splits"][name], files[name]["tokens"] = write_tokenized(
            directory / f"{name}.jsonl", directory / "tokenized" / f"{name}.arrow", context.tokenizer,
            tokenize["max_length"], spec.threads, tokenizer_sha256)
    rows = sum(s["rows"] for s in tokenized["splits"].values())
    tokens = sum(s["tokens"] for s in tokenized["splits"].values())
    return tokenized, {"op": "tokenize", "params": {"max_length": tokenize["max_length"]}, "records_in": rows,
                       "records_out": rows, "removed": 0, "added": 0, "details": {"tokens": tokens},
                       "seconds": round(time.perf_counter() - started, 4)}


def order_like(reports: list[dict], operations: list[dict]) -> list[dict]:
    """The stage reports in the spec's order (tokenize was run last, after the split)."""
    remaining = list(reports)
    ordered = []
    for op in operations:
        match = next(r for r in remaining if r["op"] == op["op"])
        remaining.remove(match)
        ordered.append(match)
    return ordered


def peak_rss_mb() -> float:
    """The largest resident set of this process or of any worker process it waited for (Linux: kilobytes)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round(max(own, children) / 1024, 1)
