"""prepare-dataset end to end: the version files the upload would write, the report (checked against its
generated schema), the trainer's own token counts and tokenization, atomic output, bad input."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from hanzo_ml.chat import encode_conversation, encode_dataset, load_tokenizer, read_chat_jsonl
from hanzo_ml.files import sha256_file
from helpers import REPO_DIR, demo_records, read_json, run_module, validate_against, write_jsonl, write_spec

SPLIT = {"seed": 42, "train": 0.8, "validation": 0.1, "test": 0.1}


def prep_spec(tmp_path: Path, tokenizer_dir: Path, sources: list[dict], **overrides) -> dict:
    spec = {"kind": "prepare-dataset", "job_name": "prep", "sources": sources, "split": SPLIT,
            "tokenizer_path": str(tokenizer_dir), "output_dir": str(tmp_path / "out"),
            "report_path": str(tmp_path / "report.json"), "issues_path": str(tmp_path / "issues.json"),
            "work_dir": str(tmp_path / "work"), "threads": 1}
    spec.update(overrides)
    return spec


def run_prepare(tmp_path: Path, spec: dict, name: str = "job.json"):
    return run_module("prepare-dataset", "--spec", str(write_spec(tmp_path / name, spec)), timeout=180)


def upload_records() -> list[dict]:
    """Demo chat records with duplicates, non-ASCII text and an instruction-form twin of a chat record."""
    records = demo_records(40)
    records[3]["messages"][-1]["content"] += " — ünïcødé ✓ \u2028 \"quoted\""
    return records + records[:4]


def upload_csv(path: Path) -> Path:
    """Instruction rows with quotes, commas, CRLF line ends, line breaks inside quotes and an empty input cell."""
    rows = ['Instruction,input,Response']
    for i, record in enumerate(demo_records(30)):
        question, answer = record["messages"][-2]["content"], record["messages"][-1]["content"]
        extra = f'"see ""note"" {i},\r\nthen reply"' if i % 3 == 0 else ""
        rows.append(f'"{question.replace(chr(34), chr(34) * 2)}",{extra},{answer}')
    rows += rows[1:4]  # duplicates
    path.write_bytes(("\r\n".join(rows) + "\r\n").encode("utf-8"))
    return path


@pytest.mark.parametrize("form", ["jsonl", "csv"])
def test_a_file_prepared_here_is_byte_for_byte_the_version_the_upload_writes(tmp_path, tiny_base_dir, form):
    npx = shutil.which("npx")
    if npx is None or not (REPO_DIR / "node_modules").exists():
        pytest.skip("the TypeScript side (npx, node_modules) is not installed here")
    source = write_jsonl(tmp_path / "upload.jsonl", upload_records()) if form == "jsonl" else \
        upload_csv(tmp_path / "upload.csv")
    script = ("import { preprocessDataset } from './datasets/ingest/preprocess.ts';"
              "preprocessDataset({ sourcePath: process.argv[1], format: process.argv[3], outDir: "
              "process.argv[2], seed: 42, splits: { train: 0.8, validation: 0.1, test: 0.1 } })"
              ".then((r) => console.log(JSON.stringify(r)));")
    done = subprocess.run([npx, "tsx", "-e", script, str(source), str(tmp_path / "uploaded"), form], cwd=REPO_DIR,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    uploaded = json.loads(done.stdout)

    spec = prep_spec(tmp_path, tiny_base_dir, [{"path": str(source), "display_name": source.name}],
                     operations=[{"op": "dedup_exact"}])
    assert run_prepare(tmp_path, spec).returncode == 0
    report = read_json(tmp_path / "report.json")

    for split in ("train", "validation", "test"):
        assert (tmp_path / "out" / f"{split}.jsonl").read_bytes() == \
            (tmp_path / "uploaded" / f"{split}.jsonl").read_bytes()
        assert report["splits"][split]["sha256"] == uploaded["splits"][split]["sha256"]
    assert report["sha256"] == uploaded["sha256"]
    assert report["operations"][0]["removed"] == uploaded["duplicates_removed"] > 0
    assert report["schema"] == uploaded["schema"]


def test_tiny_datasets_are_rebalanced_as_the_upload_does(tmp_path, tiny_base_dir):
    """Two records whose hashes both land in train: test still gets the one with the highest hash."""
    source = write_jsonl(tmp_path / "two.jsonl", demo_records(2))
    spec = prep_spec(tmp_path, tiny_base_dir, [{"path": str(source), "display_name": "two.jsonl"}])

    assert run_prepare(tmp_path, spec).returncode == 0

    report = read_json(tmp_path / "report.json")
    assert report["splits"]["train"]["records"] == 1 and report["splits"]["test"]["records"] == 1
    tokenizer = load_tokenizer(tiny_base_dir)
    for split in ("train", "validation", "test"):  # a moved record takes its tokens along
        conversations = read_chat_jsonl(tmp_path / "out" / f"{split}.jsonl", allow_empty=True)
        assert report["splits"][split]["tokens"] == sum(len(encode_conversation(tokenizer, m)) for m in conversations)


@pytest.mark.parametrize("counted_by", ["tokenize", "filter", "split"])
def test_the_report_holds_the_trainers_own_counts_and_tokenization(tmp_path, tiny_base_dir, counted_by):
    """The counts come from the tokenize pass, from the filter's own count, or from the split pass."""
    source = write_jsonl(tmp_path / "chat.jsonl", demo_records(30))
    operations = {"tokenize": [{"op": "tokenize", "max_length": 256}], "filter": [{"op": "filter", "min_tokens": 1}],
                  "split": [{"op": "dedup_exact"}]}[counted_by]
    spec = prep_spec(tmp_path, tiny_base_dir, [{"path": str(source), "display_name": "chat.jsonl"}],
                     operations=operations, threads=2)

    done = run_prepare(tmp_path, spec)

    assert done.returncode == 0, done.stderr
    report = read_json(tmp_path / "report.json")
    validate_against("prepare-report.schema.json", report)
    tokenizer = load_tokenizer(tiny_base_dir)
    assert report["tokenizer_sha256"] == sha256_file(tiny_base_dir / "tokenizer.json")
    assert report["records_in"] == report["records_out"] == 30
    assert report["schema"] == {"form": "messages", "fields": ["messages"]}
    for split in ("train", "validation", "test"):
        path = tmp_path / "out" / f"{split}.jsonl"
        conversations = read_chat_jsonl(path, allow_empty=True)
        assert report["splits"][split]["tokens"] == sum(len(encode_conversation(tokenizer, m)) for m in conversations)
        if counted_by != "tokenize":
            assert report["tokenized"] is None and not (tmp_path / "out" / "tokenized").exists()
            continue
        table = pa.ipc.open_file(tmp_path / "out" / "tokenized" / f"{split}.arrow").read_all()
        examples = encode_dataset(tokenizer, conversations, 256, split) if conversations else []
        assert table.column("input_ids").to_pylist() == [e.input_ids for e in examples]
        assert table.column("labels").to_pylist() == [e.labels for e in examples]
        assert table.column("document").to_pylist() == list(range(len(examples)))
        assert table.schema.metadata[b"tokenizer_sha256"] == report["tokenizer_sha256"].encode()
        assert table.schema.metadata[b"max_length"] == b"256"
        assert report["tokenized"]["splits"][split]["tokens"] == sum(len(e.input_ids) for e in examples)
        assert report["tokenized"]["splits"][split]["sha256"] == sha256_file(
            tmp_path / "out" / "tokenized" / f"{split}.arrow")


def test_the_same_spec_twice_gives_the_same_version(tmp_path, tiny_base_dir):
    source = write_jsonl(tmp_path / "chat.jsonl", demo_records(40) + demo_records(5))
    operations = [{"op": "dedup_exact"}, {"op": "augment", "shuffle_seed": 9}, {"op": "filter", "min_tokens": 1}]
    reports = []
    for run in ("a", "b"):
        spec = prep_spec(tmp_path, tiny_base_dir, [{"path": str(source), "display_name": "chat.jsonl"}],
                         operations=operations, output_dir=str(tmp_path / f"out-{run}"),
                         report_path=str(tmp_path / f"report-{run}.json"), threads=2 if run == "b" else 1)
        assert run_prepare(tmp_path, spec, f"job-{run}.json").returncode == 0
        reports.append(read_json(tmp_path / f"report-{run}.json"))

    assert reports[0]["sha256"] == reports[1]["sha256"]
    assert reports[0]["records_out"] == 40


def test_split_null_keeps_each_source_in_its_split(tmp_path, tiny_base_dir):
    train = write_jsonl(tmp_path / "train.jsonl", demo_records(8))
    test = write_jsonl(tmp_path / "test.jsonl", demo_records(11)[8:])
    spec = prep_spec(tmp_path, tiny_base_dir, [{"path": str(train), "display_name": "train.jsonl"},
                                               {"path": str(test), "display_name": "test.jsonl"}],
                     split=None, split_of={"train.jsonl": "train", "test.jsonl": "test"})

    assert run_prepare(tmp_path, spec).returncode == 0

    report = read_json(tmp_path / "report.json")
    assert [report["splits"][s]["records"] for s in ("train", "validation", "test")] == [8, 0, 3]
    assert (tmp_path / "out" / "test.jsonl").read_text().count("\n") == 3


def test_bad_input_exits_2_with_the_issues_and_writes_no_version(tmp_path, tiny_base_dir):
    source = tmp_path / "bad.jsonl"
    good = json.dumps(demo_records(1)[0])
    source.write_text(f"{good}\n{{oops\n" + json.dumps({"messages": [{"role": "bot", "content": "x"}]}) + "\n")
    spec = prep_spec(tmp_path, tiny_base_dir, [{"path": str(source), "display_name": "upload.jsonl"}])

    done = run_prepare(tmp_path, spec)

    assert done.returncode == 2
    assert "upload.jsonl:2" in done.stderr
    issues = read_json(tmp_path / "issues.json")["issues"]
    assert [(i["file"], i["record"], i["field"]) for i in issues] == [
        ("upload.jsonl", 2, None), ("upload.jsonl", 3, "messages[0].role")]
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("out")] == []


def test_a_spec_problem_is_an_issue_too(tmp_path, tiny_base_dir):
    source = write_jsonl(tmp_path / "chat.jsonl", demo_records(3))
    spec = prep_spec(tmp_path, tiny_base_dir, [{"path": str(source), "display_name": "chat.jsonl"}],
                     split={"seed": 1, "train": 0.5, "validation": 0.1, "test": 0.1})

    done = run_prepare(tmp_path, spec)

    assert done.returncode == 2
    assert read_json(tmp_path / "issues.json")["issues"][0]["field"] == "split"


def test_a_crash_leaves_no_output_directory(tmp_path, tiny_base_dir, monkeypatch):
    from hanzo_ml.dataprep import run
    from helpers import load_spec_dict

    source = write_jsonl(tmp_path / "chat.jsonl", demo_records(10))
    spec = prep_spec(tmp_path, tiny_base_dir, [{"path": str(source), "display_name": "chat.jsonl"}],
                     operations=[{"op": "tokenize"}])

    def crash(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(run, "write_tokenized", crash)
    with pytest.raises(RuntimeError, match="disk on fire"):
        run.prepare_dataset(load_spec_dict(spec, tmp_path), tmp_path / "job.json")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out")) == []
    assert not (tmp_path / "report.json").exists()


def test_an_existing_output_directory_is_never_replaced(tmp_path, tiny_base_dir):
    source = write_jsonl(tmp_path / "chat.jsonl", demo_records(3))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep").write_text("x")
    spec = prep_spec(tmp_path, tiny_base_dir, [{"path": str(source), "display_name": "chat.jsonl"}])

    assert run_prepare(tmp_path, spec).returncode == 2
    assert os.listdir(tmp_path / "out") == ["keep"]


# ---- the trainer reading the tokenized rows (data.tokenized_dir) -----------------------------------------

def prepared_version(tmp_path: Path, tokenizer_dir: Path, max_length: int) -> Path:
    source = write_jsonl(tmp_path / "chat.jsonl", demo_records(40))
    spec = prep_spec(tmp_path, tokenizer_dir, [{"path": str(source), "display_name": "chat.jsonl"}],
                     split={"seed": 3, "train": 0.75, "validation": 0.25, "test": 0.0},
                     operations=[{"op": "tokenize", "max_length": max_length}])
    done = run_prepare(tmp_path, spec)
    assert done.returncode == 0, done.stderr
    return tmp_path / "out"


@pytest.mark.parametrize("packing", [False, True])
def test_the_trainer_gets_the_same_batches_from_the_tokenized_rows(tmp_path, tiny_base_dir, packing):
    from hanzo_ml.recipes.components import load_chat_datasets
    from helpers import load_spec_dict, train_spec

    out = prepared_version(tmp_path, tiny_base_dir, max_length=192)
    files = {"train": out / "train.jsonl", "validation": out / "validation.jsonl"}
    data = {"packing": packing}
    plain = load_spec_dict(train_spec(tmp_path, tiny_base_dir, files, data=data), tmp_path)
    prepared = load_spec_dict(train_spec(tmp_path, tiny_base_dir, files,
                                         data={**data, "tokenized_dir": str(out / "tokenized")}), tmp_path)

    tokenized = load_chat_datasets(prepared, tmp_path / "train-job.json")
    reference = load_chat_datasets(plain, tmp_path / "train-job.json")

    assert tokenized.train == reference.train and tokenized.validation == reference.validation
    assert len(reference.train) > 0 and len(reference.validation) > 0
    batch, expected = tokenized.collate(tokenized.train[:4]), reference.collate(reference.train[:4])
    assert batch.keys() == expected.keys()
    assert all(bool((batch[k] == expected[k]).all()) for k in batch)


def test_tokenized_rows_made_for_another_length_are_refused(tmp_path, tiny_base_dir):
    from hanzo_ml.errors import InputError
    from hanzo_ml.recipes.components import load_chat_datasets
    from helpers import load_spec_dict, train_spec

    out = prepared_version(tmp_path, tiny_base_dir, max_length=128)
    files = {"train": out / "train.jsonl", "validation": out / "validation.jsonl"}
    spec = load_spec_dict(train_spec(tmp_path, tiny_base_dir, files,
                                     data={"tokenized_dir": str(out / "tokenized")}), tmp_path)

    with pytest.raises(InputError, match=r"data.tokenized_dir: train.arrow was made with max_length '128', "
                                         r"this job uses '192'"):
        load_chat_datasets(spec, tmp_path / "train-job.json")


def chain_records() -> list[dict]:
    """Demo records with exact copies, a near copy (one word changed in a long answer), PII and a German record."""
    records = demo_records(60)
    long_answer = " ".join(f"step {i} of the reset is to open the page and follow the link" for i in range(12))
    records.append({"messages": [{"role": "user", "content": "how do I reset it"},
                                 {"role": "assistant", "content": long_answer}]})
    records.append({"messages": [{"role": "user", "content": "how do I reset it"},
                                 {"role": "assistant", "content": long_answer.replace("step 5", "stage 5")}]})
    records[5]["messages"][0]["content"] += " my email is jane.doe@example.com"
    records.append({"messages": [
        {"role": "user", "content": "Wie kann ich mein Passwort zurücksetzen? Ich finde den Link nicht mehr."},
        {"role": "assistant", "content": "Klicken Sie auf den Link in der E-Mail, die wir Ihnen geschickt haben."}]})
    return records + records[:6]


def chain(max_tokens: int) -> list[dict]:
    return [{"op": "mask_pii"}, {"op": "dedup_exact"},
            {"op": "dedup_near", "shingle_words": 5, "bands": 14, "rows": 8, "threshold": 0.72, "seed": 1},
            {"op": "filter", "min_tokens": 1, "max_tokens": max_tokens, "languages": ["en"]},
            {"op": "tokenize", "max_length": 256}]


def test_the_full_chain_gives_the_same_bytes_with_one_worker_or_two(tmp_path, tiny_base_dir):
    """Every file of the version (split lines and tokenized rows) is the same whatever the number of workers, and
    the rows the filter's workers made with the token counts are the trainer's own tokenization."""
    tokenizer = load_tokenizer(tiny_base_dir)
    records = chain_records()
    longest = max(len(encode_conversation(tokenizer, r["messages"])) for r in records)
    too_long = " ".join(["please reset the password for my account now"] * 60)
    records.insert(10, {"messages": [{"role": "user", "content": too_long}, {"role": "assistant", "content": "ok"}]})
    source = write_jsonl(tmp_path / "chat.jsonl", records)
    reports = []
    for threads in (1, 2):
        spec = prep_spec(tmp_path, tiny_base_dir, [{"path": str(source), "display_name": "chat.jsonl"}],
                         operations=chain(max_tokens=longest), threads=threads, output_dir=str(tmp_path / f"out-{threads}"),
                         report_path=str(tmp_path / f"report-{threads}.json"), work_dir=str(tmp_path / f"w{threads}"))
        done = run_prepare(tmp_path, spec, f"job-{threads}.json")
        assert done.returncode == 0, done.stderr
        reports.append(read_json(tmp_path / f"report-{threads}.json"))

    one, two = reports
    assert one["sha256"] == two["sha256"]
    assert one["tokenized"] == two["tokenized"]
    by_op = {op["op"]: op for op in one["operations"]}
    assert by_op["dedup_exact"]["removed"] == 6 and by_op["dedup_near"]["removed"] >= 1
    assert by_op["filter"]["details"]["removed"] == {"too_few_tokens": 0, "too_many_tokens": 1, "language": 1}
    assert by_op["mask_pii"]["details"]["redactions"]["email"] == 2
    kept = "".join((tmp_path / "out-2" / f"{split}.jsonl").read_text() for split in ("train", "validation", "test"))
    assert "step 5" in kept and "stage 5" not in kept and "Passwort" not in kept and "jane.doe" not in kept
    assert too_long not in kept
    for split in ("train", "validation", "test"):
        conversations = read_chat_jsonl(tmp_path / "out-2" / f"{split}.jsonl", allow_empty=True)
        table = pa.ipc.open_file(tmp_path / "out-2" / "tokenized" / f"{split}.arrow").read_all()
        examples = encode_dataset(tokenizer, conversations, 256, split) if conversations else []
        assert table.column("input_ids").to_pylist() == [e.input_ids for e in examples]
        assert table.column("labels").to_pylist() == [e.labels for e in examples]
        assert two["splits"][split]["tokens"] == sum(len(encode_conversation(tokenizer, m)) for m in conversations)


def test_a_record_the_split_moves_is_tokenized_in_its_new_split(tmp_path, tiny_base_dir):
    """The rows are written beside the split lines; when rebalancing moves a record afterwards they are made
    again from the split files, so each file's rows are still its records'."""
    source = write_jsonl(tmp_path / "two.jsonl", demo_records(2))
    spec = prep_spec(tmp_path, tiny_base_dir, [{"path": str(source), "display_name": "two.jsonl"}],
                     operations=[{"op": "tokenize", "max_length": 256}])

    assert run_prepare(tmp_path, spec).returncode == 0

    report = read_json(tmp_path / "report.json")
    tokenizer = load_tokenizer(tiny_base_dir)
    for split in ("train", "test"):
        conversations = read_chat_jsonl(tmp_path / "out" / f"{split}.jsonl")
        table = pa.ipc.open_file(tmp_path / "out" / "tokenized" / f"{split}.arrow").read_all()
        assert table.column("input_ids").to_pylist() == [e.input_ids for e in encode_dataset(tokenizer, conversations,
                                                                                               256, split)]
        assert report["tokenized"]["splits"][split]["rows"] == 1
