"""The job runner with a spec that holds lists of paths (prepare-dataset's sources and parents): dotted input
fields land inside the spec, the command makes its own output directory, and bad input uploads its issues file.
Every job here runs the real prepare-dataset command through `python -m hanzo_ml job`, with a file:// store."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hanzo_ml.jobio.envelope import parse_envelope
from hanzo_ml.jobio.scratch import Scratch, build_spec
from hanzo_ml.jobio.store import ObjectStore
from helpers import trainer_env

SPLITS = ("train", "validation", "test")


def record(i: int) -> dict:
    return {"messages": [{"role": "user", "content": f"question number {i} about the order"},
                         {"role": "assistant", "content": f"answer number {i}, with the details"}]}


def prepare_envelope(job_uri: str, split_uris: dict[str, str], tokenizer_uri: str, parents: list[str]) -> dict:
    """A derive's job as activities/dataset-prep.ts writes it: every path of the spec an input or output field."""
    return {
        "job_name": "prep-job", "job_uri": job_uri, "tool": "trainer",
        "spec": {
            "kind": "prepare-dataset", "job_name": "prep-job",
            "sources": [{"path": "input", "format": "jsonl", "display_name": f"{s}.jsonl"} for s in SPLITS],
            "split_of": {f"{s}.jsonl": s for s in SPLITS},
            "parents": ["input"] * len(parents),
            "operations": [{"op": "dedup_exact", "against_parents": bool(parents)}],
            "tokenizer_path": "input", "output_dir": "output", "report_path": "output", "issues_path": "output",
            "work_dir": "scratch",
        },
        "inputs": {
            **{f"sources.{i}.path": {"uri": split_uris[s], "kind": "file"} for i, s in enumerate(SPLITS)},
            **{f"parents.{i}": {"uri": uri, "kind": "file"} for i, uri in enumerate(parents)},
            "tokenizer_path": {"uri": tokenizer_uri, "kind": "dir"},
        },
        "outputs": {"output_dir": "dir", "report_path": "file", "issues_path": "file"},
        "result_field": "report_path",
    }


def write_splits(root: Path, lines: dict[str, list[str]]) -> dict[str, str]:
    uris = {}
    for s in SPLITS:
        path = root / "parent" / f"{s}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(line + "\n" for line in lines[s]))
        uris[s] = path.as_uri()
    return uris


def run_job(envelope_uri: str, scratch: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hanzo_ml", "job", "--envelope", envelope_uri, "--scratch",
                           str(scratch)], env=trainer_env(), capture_output=True, text=True, timeout=240)


@pytest.fixture
def job_dir(tmp_path) -> Path:
    (tmp_path / "job").mkdir()
    return tmp_path / "job"


def test_dotted_input_fields_set_the_paths_inside_the_spec_and_leave_the_output_dir_unmade(tmp_path, job_dir):
    uris = write_splits(tmp_path, {s: [json.dumps(record(0))] for s in SPLITS})
    doc = prepare_envelope(job_dir.as_uri(), uris, (tmp_path / "tok").as_uri(), [uris["train"]])
    envelope = parse_envelope(doc, "e")
    scratch = Scratch(tmp_path / "scratch")

    spec = build_spec(ObjectStore({}), envelope, scratch)

    assert [s["path"] for s in spec["sources"]] == [str(tmp_path / "parent" / f"{s}.jsonl") for s in SPLITS]
    assert spec["sources"][0]["display_name"] == "train.jsonl"  # the rest of the item is kept
    assert spec["parents"] == [str(tmp_path / "parent" / "train.jsonl")]
    assert envelope.spec["sources"][0]["path"] == "input"  # the envelope's own spec is not changed
    # prepare-dataset refuses an output_dir that exists: the runner leaves it to the command
    assert spec["output_dir"] == str(scratch.outputs / "output_dir")
    assert not Path(spec["output_dir"]).exists()
    assert spec["work_dir"] == str(scratch.work / "prepare-dataset")  # its dedup buckets go to the job's scratch


@pytest.mark.parametrize("field, message", [
    ("sources.3.path", "spec.sources has no item 3"),
    ("sources.x.path", "spec.sources has no item x"),
    ("nothing.0", "spec has no field nothing"),
    ("split_of.train.jsonl.deeper", "spec.split_of has no field train"),
])
def test_a_dotted_input_field_that_names_no_place_in_the_spec_is_refused_naming_it(tmp_path, job_dir, field, message):
    uris = write_splits(tmp_path, {s: [] for s in SPLITS})
    doc = prepare_envelope(job_dir.as_uri(), uris, (tmp_path / "tok").as_uri(), [])
    doc["inputs"][field] = {"uri": uris["train"], "kind": "file"}
    (job_dir / "envelope.json").write_text(json.dumps(doc))

    done = run_job((job_dir / "envelope.json").as_uri(), tmp_path / "scratch")

    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"{(job_dir / 'envelope.json').as_uri()}: inputs.{field}: {message}"


def test_a_prepare_job_through_the_runner_uploads_its_version_and_drops_records_of_its_parents(tmp_path, job_dir,
                                                                                              tiny_base_dir):
    lines = {"train": [json.dumps(record(i)) for i in range(6)], "validation": [json.dumps(record(10))],
             "test": [json.dumps(record(20))]}
    uris = write_splits(tmp_path, lines)
    earlier = tmp_path / "earlier.jsonl"
    earlier.write_text(json.dumps(record(1)) + "\n" + json.dumps(record(20)) + "\n")
    doc = prepare_envelope(job_dir.as_uri(), uris, tiny_base_dir.as_uri(), [earlier.as_uri()])
    (job_dir / "envelope.json").write_text(json.dumps(doc))

    done = run_job((job_dir / "envelope.json").as_uri(), tmp_path / "scratch")

    assert done.returncode == 0, done.stderr + (job_dir / "job.log").read_text()
    result = json.loads((job_dir / "result.json").read_text())
    assert (result["records_in"], result["records_out"]) == (8, 6)
    out = job_dir / "outputs" / "output_dir"
    assert len((out / "train.jsonl").read_text().splitlines()) == 5
    assert (out / "test.jsonl").read_text() == ""
    assert not (job_dir / "outputs" / "issues_path").exists()


def test_bad_input_exits_2_and_uploads_the_issues_file_without_a_result(tmp_path, job_dir, tiny_base_dir):
    lines = {"train": [json.dumps(record(0)), '{"messages": "not a list"}'], "validation": [], "test": []}
    uris = write_splits(tmp_path, lines)
    doc = prepare_envelope(job_dir.as_uri(), uris, tiny_base_dir.as_uri(), [])
    (job_dir / "envelope.json").write_text(json.dumps(doc))

    done = run_job((job_dir / "envelope.json").as_uri(), tmp_path / "scratch")

    assert done.returncode == 2, done.stderr
    issues = json.loads((job_dir / "outputs" / "issues_path").read_text())["issues"]
    assert issues[0]["file"] == "train.jsonl" and issues[0]["record"] == 2, issues
    assert not (job_dir / "result.json").exists()
    assert not (job_dir / "outputs" / "output_dir").exists()
