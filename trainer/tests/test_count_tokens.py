"""count-tokens: records and rendered-conversation tokens per split, from the tokenizer alone."""
from __future__ import annotations

import subprocess
import sys

from hanzo_ml.chat import encode_conversation, load_tokenizer
from hanzo_ml.files import sha256_file
from helpers import demo_records, read_json, trainer_env, write_jsonl, write_spec


def count_spec(tmp_path, tiny_base_dir) -> dict:
    train = write_jsonl(tmp_path / "train.jsonl", demo_records(10))
    test = write_jsonl(tmp_path / "test.jsonl", demo_records(13)[10:])
    return {"kind": "count-tokens", "job_name": "count", "tokenizer_path": str(tiny_base_dir),
            "inputs": {"train": str(train), "test": str(test)}, "output_path": str(tmp_path / "counts.json")}


def test_counts_are_the_tokens_of_each_rendered_conversation(tmp_path, tiny_base_dir):
    spec = write_spec(tmp_path / "job.json", count_spec(tmp_path, tiny_base_dir))
    probe = ("import sys; from hanzo_ml.cli import main; code = main(['count-tokens', '--spec', sys.argv[1]]); "
             "print(code, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe, str(spec)], env=trainer_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.split() == ["0", "False"], done.stderr  # the tokenizer alone, never torch

    report = read_json(tmp_path / "counts.json")
    tokenizer = load_tokenizer(tiny_base_dir)
    records = [r["messages"] for r in demo_records(13)]
    assert report["tokenizer_sha256"] == sha256_file(tiny_base_dir / "tokenizer.json")
    assert report["splits"]["train"] == {
        "records": 10, "tokens": sum(len(encode_conversation(tokenizer, m)) for m in records[:10])}
    assert report["splits"]["test"] == {
        "records": 3, "tokens": sum(len(encode_conversation(tokenizer, m)) for m in records[10:])}


def test_a_missing_split_file_is_named(tmp_path, tiny_base_dir, capsys):
    from hanzo_ml.cli import main

    spec = count_spec(tmp_path, tiny_base_dir)
    spec["inputs"]["validation"] = str(tmp_path / "missing.jsonl")
    assert main(["count-tokens", "--spec", str(write_spec(tmp_path / "job.json", spec))]) == 2
    assert capsys.readouterr().err.strip().endswith(f"inputs.validation: no such file: {tmp_path / 'missing.jsonl'}")
