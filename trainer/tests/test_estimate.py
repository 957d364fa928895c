"""estimate-tokens: the dry run's tokens and steps equal what training then counts on the same spec."""
from __future__ import annotations

import pytest

import hanzo_ml.lora as loop
from helpers import load_spec_dict, read_json, run_module, train_spec, write_jsonl, write_spec
from test_recipes import preference_records


def estimate(spec: dict, root) -> dict:
    spec_path = write_spec(root / "estimate-job.json", spec)
    done = run_module("estimate-tokens", "--spec", str(spec_path), "--output", str(root / "estimate.json"))
    assert done.returncode == 0, done.stderr
    return read_json(root / "estimate.json")


@pytest.mark.parametrize("variant", ["lora", "packed", "orpo"])
def test_the_estimated_tokens_are_the_tokens_training_counts(variant, tmp_path, tiny_base_dir, chat_files):
    files = chat_files
    overrides: dict = {}
    if variant == "packed":
        overrides["data"] = {"packing": True}
    if variant == "orpo":
        pairs = preference_records(30)
        files = {"train": write_jsonl(tmp_path / "pairs.jsonl", pairs[:24]),
                 "validation": write_jsonl(tmp_path / "pairs-val.jsonl", pairs[24:])}
        overrides["method"] = "orpo"
    # 5 steps x 2 micro-batches x 4 = 40 items of 48 (or fewer packed rows): the order crosses into epoch 2 where
    # there are fewer items than that, so the count depends on the seeded order, not only on the data.
    spec = train_spec(tmp_path, tiny_base_dir, files, hyperparameters={"max_steps": 5}, **overrides)
    predicted = estimate(spec, tmp_path)
    result = loop.train(load_spec_dict(spec, tmp_path), tmp_path / "train-job.json", tmp_path / "work")
    assert predicted["steps"] == result["steps"] == 5
    assert predicted["tokens"] == result["totals"]["tokens"] == result["tokens_seen"] > 0


def test_the_estimate_depends_on_the_seed_when_it_samples_part_of_an_epoch(tmp_path, tiny_base_dir, chat_files):
    one = estimate(train_spec(tmp_path, tiny_base_dir, chat_files, hyperparameters={"max_steps": 1, "seed": 1}), tmp_path)
    two = estimate(train_spec(tmp_path, tiny_base_dir, chat_files, hyperparameters={"max_steps": 1, "seed": 2}), tmp_path)
    assert one["steps"] == two["steps"] == 1
    assert one["tokens"] != two["tokens"]


def test_a_spec_with_a_missing_train_file_is_refused_naming_the_field(tmp_path, tiny_base_dir, chat_files):
    spec = train_spec(tmp_path, tiny_base_dir, {**chat_files, "train": tmp_path / "absent.jsonl"})
    done = run_module("estimate-tokens", "--spec", str(write_spec(tmp_path / "job.json", spec)),
                      "--output", str(tmp_path / "out.json"))
    assert done.returncode != 0 and "train_path" in done.stderr
