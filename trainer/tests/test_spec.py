"""Job specs are validated against the generated contract; a bad one exits 2 with one line naming the field."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hanzo_ml.cli import main
from hanzo_ml.errors import InputError
from hanzo_ml.spec import load_spec
from helpers import train_spec, trainer_env, write_jsonl, write_spec


def run_train_cli(tmp_path, spec: dict, capsys) -> tuple[int, str]:
    path = write_spec(tmp_path / "job.json", spec)
    code = main(["train", "--spec", str(path), "--workdir", str(tmp_path / "work")])
    return code, capsys.readouterr().err.strip()


@pytest.fixture
def spec(tmp_path, chat_files):
    base = tmp_path / "base"
    base.mkdir()
    return train_spec(tmp_path, base, chat_files)


def test_a_valid_spec_loads_with_the_contract_defaults_filled(tmp_path, spec):
    del spec["hyperparameters"]["gradient_accumulation_steps"]
    del spec["threads"]
    loaded = load_spec(write_spec(tmp_path / "job.json", spec), "train")
    assert loaded.hyperparameters.gradient_accumulation_steps == 1
    assert loaded.hyperparameters.target_modules == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert loaded.hyperparameters.lora_dropout == 0
    assert loaded.threads == 2
    assert loaded.checkpoint.keep_last == 2


def test_a_negative_learning_rate_exits_2_naming_the_field(tmp_path, spec, capsys):
    spec["hyperparameters"]["learning_rate"] = -1
    code, err = run_train_cli(tmp_path, spec, capsys)
    assert code == 2
    assert err.startswith(f"{tmp_path / 'job.json'}: hyperparameters.learning_rate: -1 is less than")
    assert "\n" not in err


def test_a_missing_required_field_is_named(tmp_path, spec, capsys):
    del spec["run_id"]
    code, err = run_train_cli(tmp_path, spec, capsys)
    assert (code, err) == (2, f"{tmp_path / 'job.json'}: run_id: is required")


def test_an_unknown_field_is_named(tmp_path, spec, capsys):
    spec["hyperparameters"]["learning_rat"] = 0.1
    code, err = run_train_cli(tmp_path, spec, capsys)
    assert code == 2
    assert err.endswith("hyperparameters.learning_rat: is not a field of this job kind")


def test_a_wrong_type_deep_in_the_spec_is_named(tmp_path, spec, capsys):
    spec["hyperparameters"]["target_modules"] = ["q_proj", 3]
    code, err = run_train_cli(tmp_path, spec, capsys)
    assert code == 2
    assert "hyperparameters.target_modules[1]: 3 is not of type 'string'" in err


def test_a_spec_of_another_kind_is_refused(tmp_path, spec, capsys):
    spec["kind"] = "eval"
    code, err = run_train_cli(tmp_path, spec, capsys)
    assert code == 2
    assert "kind: this command runs 'train' jobs, the spec is a 'eval' job" in err


def test_a_tracking_uri_must_be_an_absolute_url(tmp_path, spec, capsys):
    spec["tracking_uri"] = "not a url"
    code, err = run_train_cli(tmp_path, spec, capsys)
    assert code == 2
    assert "tracking_uri: 'not a url' is not an absolute URL" in err


def test_relative_paths_are_refused(tmp_path, spec, capsys):
    spec["train_path"] = "data/train.jsonl"
    code, err = run_train_cli(tmp_path, spec, capsys)
    assert code == 2
    assert err.endswith('train_path: expected an absolute local path, got "data/train.jsonl"')


def test_a_missing_input_file_is_named(tmp_path, spec, capsys):
    spec["validation_path"] = str(tmp_path / "nowhere.jsonl")
    code, err = run_train_cli(tmp_path, spec, capsys)
    assert code == 2
    assert err.endswith(f"validation_path: no such file: {tmp_path / 'nowhere.jsonl'}")


def test_invalid_json_is_reported_with_its_position(tmp_path, capsys):
    path = tmp_path / "job.json"
    path.write_text('{"kind": "train",\n  oops}')
    code = main(["train", "--spec", str(path), "--workdir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith(f"{path}: not valid JSON") and "line 2" in err


def test_a_bad_dataset_record_names_file_line_and_field(tmp_path, tiny_base_dir, chat_files, capsys):
    records = [json.loads(line) for line in chat_files["train"].read_text().splitlines()]
    records[2]["messages"][1]["role"] = "bot"
    write_jsonl(chat_files["train"], records)
    spec = train_spec(tmp_path, tiny_base_dir, chat_files)
    code, err = run_train_cli(tmp_path, spec, capsys)
    assert code == 2
    assert err == f"{chat_files['train']}:3: messages[1].role: expected one of system, user, assistant, got \"bot\""


def test_target_modules_the_model_lacks_exit_2_naming_the_field(tmp_path, tiny_base_dir, chat_files, capsys):
    spec = train_spec(tmp_path, tiny_base_dir, chat_files, hyperparameters={"target_modules": ["qkv_proj"]})
    code, err = run_train_cli(tmp_path, spec, capsys)
    assert code == 2
    assert err.startswith(f"{tmp_path / 'job.json'}: hyperparameters.target_modules: ")
    assert "qkv_proj" in err


def test_a_bad_spec_is_rejected_before_torch_is_even_imported(tmp_path, spec):
    spec["hyperparameters"]["max_steps"] = 0
    path = write_spec(tmp_path / "job.json", spec)
    probe = ("import sys; from hanzo_ml.cli import main; code = main(['train', '--spec', sys.argv[1], "
             "'--workdir', sys.argv[2]]); print(code, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe, str(path), str(tmp_path)], env=trainer_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["2", "False"]
    assert "hyperparameters.max_steps: 0 is less than or equal to the minimum of 0" in done.stderr


def test_count_tokens_specs_keep_their_inputs_as_a_map(tmp_path):
    spec = {"kind": "count-tokens", "job_name": "count", "tokenizer_path": "/models/base",
            "inputs": {"train": "/data/train.jsonl"}, "output_path": "/out/counts.json"}
    loaded = load_spec(write_spec(tmp_path / "job.json", spec), "count-tokens")
    assert loaded.inputs == {"train": "/data/train.jsonl"}
    spec["inputs"]["test"] = "relative.jsonl"
    with pytest.raises(InputError, match="inputs.test: expected an absolute local path"):
        load_spec(write_spec(tmp_path / "job.json", spec), "count-tokens")
