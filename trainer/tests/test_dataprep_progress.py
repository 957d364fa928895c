"""prepare-dataset's reading progress (dataprep/progress.py): records read and how far into the input files the
reader is, written at a bounded rate, never half a file, bytes never going back, and whole once reading is done;
and the job runner copying it to the job's progress.json like a train job's."""
from __future__ import annotations

import gzip
import json
import secrets
import time
from pathlib import Path
from types import SimpleNamespace

from hanzo_ml.dataprep.progress import InputFiles, ProgressFile, open_offset, reading_progress
from hanzo_ml.jobio.envelope import parse_envelope
from hanzo_ml.jobio.runner import progress_file
from hanzo_ml.jobio.scratch import Scratch, build_spec
from hanzo_ml.jobio.store import ObjectStore


def spec_of(tmp_path: Path, *paths: Path) -> SimpleNamespace:
    return SimpleNamespace(work_dir=str(tmp_path / "work"), sources=[SimpleNamespace(path=str(p)) for p in paths])


def read(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "work" / "progress.json").read_text())


def test_it_counts_the_records_read_and_ends_with_every_byte_read(tmp_path):
    (tmp_path / "work").mkdir()
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("x" * 1000)
    b.write_text("y" * 500)

    seen = list(reading_progress(iter(range(1000)), spec_of(tmp_path, a, b)))

    assert seen == list(range(1000))
    doc = read(tmp_path)
    assert (doc["stage"], doc["records_read"], doc["bytes_read"], doc["bytes_total"]) == ("reading", 1000, 1500, 1500)
    assert doc["at"].endswith("Z")


def test_it_tells_how_far_into_the_open_source_file_the_reader_is_from_its_offset(tmp_path):
    a, b = tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl"
    a.write_bytes(b"\x1f\x8b" + b"z" * 3998)
    b.write_bytes(b"q" * 6000)
    inputs = InputFiles([a, b])
    assert inputs.total == 10_000
    with open(b, "rb") as f:
        f.read(2000)  # unbuffered position as the kernel sees it: at least what was read
        found = open_offset({str(b.resolve())})
        assert found is not None and found[0] == str(b.resolve()) and found[1] >= 2000
        assert 6000 <= inputs.bytes_read(open_offset) <= 10_000  # a's 4000 before it, plus b's offset
    assert inputs.bytes_read(open_offset) is None  # nothing open: not known


def test_a_directory_source_counts_its_files_in_reading_order(tmp_path):
    d = tmp_path / "parts"
    d.mkdir()
    (d / "2.jsonl").write_text("b" * 30)
    (d / "1.jsonl").write_text("a" * 20)
    (d / ".hidden").write_text("ignored")
    inputs = InputFiles([d])
    assert inputs.total == 50
    assert inputs.bytes_read(lambda paths: (str((d / "2.jsonl").resolve()), 10)) == 30


def test_it_writes_at_most_once_per_interval_and_bytes_never_go_back(tmp_path):
    (tmp_path / "work").mkdir()
    src = tmp_path / "a.jsonl"
    src.write_text("x" * 100)
    offsets = iter([None, 50, 60, 20, 90])
    target = str(src.resolve())
    progress = ProgressFile(tmp_path / "work" / "progress.json", InputFiles([src]), every_s=3600,
                            offset_of=lambda paths: None if (o := next(offsets)) is None else (target, o))
    progress.write()  # before the file is open: no offset yet
    progress.tick(3)  # the first look is written at once, whatever the interval
    assert (read(tmp_path)["records_read"], read(tmp_path)["bytes_read"]) == (3, 50)
    progress.tick(5)  # within the interval: not written
    assert read(tmp_path)["records_read"] == 3
    progress.every_s = 0
    progress.tick(7)
    progress.tick(8)
    assert (read(tmp_path)["records_read"], read(tmp_path)["bytes_read"]) == (8, 60)  # 20 < 60: kept at 60
    progress.tick(9)
    assert read(tmp_path)["bytes_read"] == 90
    assert not list((tmp_path / "work").glob("*.tmp*"))  # replaced whole, no partial file left


def test_bytes_stay_unknown_while_no_offset_can_be_told(tmp_path):
    (tmp_path / "work").mkdir()
    src = tmp_path / "a.parquet"
    src.write_bytes(b"PAR1" + b"0" * 96)
    progress = ProgressFile(tmp_path / "work" / "progress.json", InputFiles([src]), every_s=0, offset_of=lambda _: None)
    progress.tick(3)
    assert read(tmp_path)["bytes_read"] is None
    progress.write(done=True)
    assert read(tmp_path)["bytes_read"] == 100


def test_reading_a_gzip_source_moves_bytes_read_before_the_end(tmp_path, monkeypatch):
    (tmp_path / "work").mkdir()
    src = tmp_path / "a.jsonl.gz"
    with gzip.open(src, "wt") as f:  # hex noise: the compressed file is large, read in many buffers
        for i in range(20_000):
            f.write(json.dumps({"n": i, "noise": secrets.token_hex(32)}) + "\n")
    monkeypatch.setattr("hanzo_ml.dataprep.progress.CHECK_EVERY", 1000)
    monkeypatch.setattr("hanzo_ml.dataprep.progress.EVERY_S", 0.0)
    snapshots = []

    def lines():
        with gzip.open(src, "rt") as f:
            for n, line in enumerate(f):
                if n == 10_000:
                    snapshots.append(read(tmp_path))
                yield line

    for _ in reading_progress(lines(), spec_of(tmp_path, src)):
        pass
    # halfway through the records: some of the compressed bytes read, not all of them
    mid = snapshots[0]
    assert 9_000 < mid["records_read"] <= 10_000
    assert mid["bytes_read"] is not None and 0 < mid["bytes_read"] < mid["bytes_total"]
    assert read(tmp_path)["bytes_read"] == src.stat().st_size


def test_the_job_runner_copies_prepare_datasets_progress_from_its_work_dir(tmp_path):
    envelope = parse_envelope({
        "job_name": "prep", "job_uri": (tmp_path / "job").as_uri(), "tool": "trainer",
        "spec": {"kind": "prepare-dataset", "job_name": "prep", "sources": [], "tokenizer_path": "input",
                 "output_dir": "output", "report_path": "output", "issues_path": "output", "work_dir": "scratch"},
        "inputs": {"tokenizer_path": {"uri": (tmp_path / "tok").as_uri(), "kind": "dir"}},
        "outputs": {"output_dir": "dir", "report_path": "file", "issues_path": "file"},
        "result_field": "report_path",
    }, "e")
    scratch = Scratch(tmp_path / "scratch")
    spec = build_spec(ObjectStore({}), envelope, scratch)
    assert progress_file(envelope, scratch) == Path(spec["work_dir"]) / "progress.json"


def test_it_is_cheap_per_record(tmp_path):
    (tmp_path / "work").mkdir()
    src = tmp_path / "a.jsonl"
    src.write_text("x")
    started = time.perf_counter()
    for _ in reading_progress(iter(range(200_000)), spec_of(tmp_path, src)):
        pass
    assert time.perf_counter() - started < 2.0
