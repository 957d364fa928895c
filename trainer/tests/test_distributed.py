"""Distributed training under torchrun on CPU: two gloo processes (ddp, and fsdp for full and lora), compared with
one process on the same global batch; rank 0 alone writes whole checkpoints; a run stopped mid-way resumes under
torchrun to the same weights."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from hanzo_ml.distributed import check_strategy
from hanzo_ml.errors import InputError
from helpers import REPO_DIR, read_json, train_spec, trainer_env, write_spec
from test_tracking import TrackingServer

pytestmark = pytest.mark.slow  # several trainer processes

# Not bitwise: each rank runs its matmuls on half the rows and gloo sums the gradients, so float additions happen
# in another order than in one process. 1e-4 relative is far below any real difference (a different batch, a
# missed all-reduce, a wrong loss scale all show up at 1e-2 or more).
RTOL, ATOL = 1e-4, 1e-6
# Full fine-tuning also updates embedding rows of tokens whose gradient is a near-zero sum of cancelling terms;
# Adam divides it by its own tiny magnitude, so summation-order noise there moves a weight by ~2e-6. The learning
# rate (5e-3) is what any real error would move it by.
FULL_ATOL = 1e-5
OVERRIDES = {"hyperparameters": {"max_steps": 4, "batch_size": 4, "gradient_accumulation_steps": 2},
             "checkpoint": {"every_steps": 2, "keep_last": 3}}


def run(root: Path, spec: dict, processes: int, strategy: str = "ddp", **env) -> subprocess.CompletedProcess:
    root.mkdir(parents=True, exist_ok=True)
    spec = {**spec, "hardware": {"processes": processes, "strategy": strategy}}
    path = write_spec(root / "job.json", spec)
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"] if processes > 1 else []
    return subprocess.run([sys.executable, *launcher, "-m", "hanzo_ml", "train", "--spec", str(path), "--workdir",
                           str(root / "work")], env={**trainer_env(), **env}, capture_output=True, text=True,
                          timeout=600)


def losses(server: TrackingServer) -> dict[int, float]:
    return {p["step"]: p["value"] for p in server.delivered() if p["key"] == "train/loss"}


def adapter(root: Path) -> dict[str, torch.Tensor]:
    return load_file(root / "output" / "adapter" / "adapter_model.safetensors")


def weights(root: Path, method: str, checkpoint: str | None = None) -> dict[str, torch.Tensor]:
    """The final output's trained weights, or a checkpoint's."""
    if checkpoint is None:
        return adapter(root) if method == "lora" else load_file(root / "output" / "model" / "model.safetensors")
    directory = root / "checkpoints" / checkpoint
    return load_file(directory / "adapter" / "adapter_model.safetensors") if method == "lora" \
        else load_file(directory / "model" / "model.safetensors")


def assert_close_adapters(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = ATOL) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=RTOL, atol=atol, msg=name)


def test_two_ddp_processes_match_one_process_on_the_same_global_batch(tmp_path, tiny_base_dir, chat_files):
    servers = {"one": TrackingServer(), "two": TrackingServer()}
    try:
        one = tmp_path / "one"
        single = run(one, train_spec(one, tiny_base_dir, chat_files, tracking_uri=servers["one"].uri, **OVERRIDES), 1)
        assert single.returncode == 0, single.stderr
        two = tmp_path / "two"
        ddp = run(two, train_spec(two, tiny_base_dir, chat_files, tracking_uri=servers["two"].uri, **OVERRIDES), 2)
        assert ddp.returncode == 0, ddp.stderr
        one_losses, two_losses = losses(servers["one"]), losses(servers["two"])
    finally:
        for server in servers.values():
            server.close()
    assert "rank 1 of 2 (gloo)" in ddp.stderr
    assert sorted(two_losses) == sorted(one_losses) == [1, 2, 3, 4]  # rank 0 alone logs: one point per step
    for step in one_losses:
        assert two_losses[step] == pytest.approx(one_losses[step], rel=RTOL), step
    assert_close_adapters(adapter(one), adapter(two))
    one_result, two_result = read_json(one / "work" / "result.json"), read_json(two / "work" / "result.json")
    assert two_result["tokens_seen"] == one_result["tokens_seen"]  # every rank's tokens, summed
    # rank 0 wrote each checkpoint once; device-hours count both processes
    assert sorted(p.name for p in (two / "checkpoints").iterdir()) == ["best", "step-00000002", "step-00000004"]
    assert two_result["totals"]["device_hours"] > 0


def test_a_ddp_run_stopped_by_a_fault_resumes_under_torchrun_to_the_same_weights(tmp_path, tiny_base_dir,
                                                                                  chat_files):
    straight = tmp_path / "straight"
    assert run(straight, train_spec(straight, tiny_base_dir, chat_files, **OVERRIDES), 2).returncode == 0

    stopped = tmp_path / "stopped"
    spec = train_spec(stopped, tiny_base_dir, chat_files, **OVERRIDES)
    first = run(stopped, spec, 2, HANZO_ML_FAULT_NAN_AT_STEP="3")
    assert first.returncode != 0  # torchrun reports any worker failure as its own exit 1 ...
    failure = read_json(stopped / "work" / "failure.json")  # ... the failure file says which
    assert (failure["kind"], failure["step"]) == ("diverged", 2)

    second = run(stopped, spec, 2, HANZO_ML_FAULT_NAN_AT_STEP="3")  # fired once: this run gets past step 3
    assert second.returncode == 0, second.stderr
    result = read_json(stopped / "work" / "result.json")
    assert (result["resumed_from_step"], result["steps"]) == (2, 4)
    assert_close_adapters(adapter(straight), adapter(stopped))


def test_processes_that_do_not_match_the_launch_are_refused(tmp_path, tiny_base_dir, chat_files):
    root = tmp_path / "run"
    root.mkdir()
    spec = {**train_spec(root, tiny_base_dir, chat_files), "hardware": {"processes": 2}}
    path = write_spec(root / "job.json", spec)
    done = subprocess.run([sys.executable, "-m", "hanzo_ml", "train", "--spec", str(path), "--workdir",
                           str(root / "work")], env=trainer_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert "hardware.processes: 2 on 1 node(s), but this process was started as one of 1" in done.stderr


@pytest.mark.parametrize("strategy", ["deepspeed_zero2", "deepspeed_zero3"])
def test_a_deepspeed_strategy_without_deepspeed_installed_is_a_clear_input_error(strategy, monkeypatch):
    import importlib.util
    from types import SimpleNamespace

    check_strategy(SimpleNamespace(strategy=strategy, processes=2), "job.json", "lora")  # installed: accepted
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed" else real(name, *a))
    with pytest.raises(InputError, match=f"hardware.strategy: {strategy} needs the deepspeed package"):
        check_strategy(SimpleNamespace(strategy=strategy, processes=2), "job.json", "lora")


@pytest.mark.parametrize("name", ["zero2.json", "zero3.json"])
def test_the_deepspeed_zero_configs_parse_and_name_their_stage(name):
    config = json.loads((REPO_DIR / "recipes" / "deepspeed" / name).read_text())
    stage = int(name[4])
    assert config["zero_optimization"]["stage"] == stage
    assert config["train_micro_batch_size_per_gpu"] == "auto"
    assert config["gradient_accumulation_steps"] == "auto"
    if stage == 3:
        assert config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True


SHARDED = ["fsdp", "deepspeed_zero2", "deepspeed_zero3"]


@pytest.mark.parametrize("strategy", SHARDED)
@pytest.mark.parametrize("method", ["full", "lora"])
def test_two_sharded_processes_match_one_process_and_write_whole_checkpoints(tmp_path, tiny_base_dir, chat_files,
                                                                             method, strategy):
    servers = {"one": TrackingServer(), "two": TrackingServer()}
    overrides = {**OVERRIDES, "method": method}
    try:
        one = tmp_path / "one"
        single = run(one, train_spec(one, tiny_base_dir, chat_files, tracking_uri=servers["one"].uri, **overrides), 1)
        assert single.returncode == 0, single.stderr
        two = tmp_path / "two"
        sharded = run(two, train_spec(two, tiny_base_dir, chat_files, tracking_uri=servers["two"].uri, **overrides),
                      2, strategy)
        assert sharded.returncode == 0, sharded.stderr
        one_losses, two_losses = losses(servers["one"]), losses(servers["two"])
        one_evals = {p["step"]: p["value"] for p in servers["one"].delivered() if p["key"] == "eval/loss"}
        two_evals = {p["step"]: p["value"] for p in servers["two"].delivered() if p["key"] == "eval/loss"}
    finally:
        for server in servers.values():
            server.close()
    assert "rank 1 of 2 (gloo)" in sharded.stderr
    assert sorted(two_losses) == sorted(one_losses) == [1, 2, 3, 4]
    for step in one_losses:
        assert two_losses[step] == pytest.approx(one_losses[step], rel=RTOL), step
    assert sorted(two_evals) == sorted(one_evals) == [2, 4]  # a sharded evaluation runs on every rank
    for step in one_evals:
        assert two_evals[step] == pytest.approx(one_evals[step], rel=RTOL), step
    # the output and every checkpoint hold whole tensors, the same names and shapes one process writes
    atol = FULL_ATOL if method == "full" else ATOL
    assert_close_adapters(weights(one, method), weights(two, method), atol)
    for name in ("step-00000002", "step-00000004"):
        assert_close_adapters(weights(one, method, name), weights(two, method, name), atol)
        if strategy.startswith("deepspeed"):  # DeepSpeed's own files: one optimizer partition per rank
            files = {p.name for p in (two / "checkpoints" / name / "deepspeed" / "state").iterdir()}
            assert {"zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"} <= files
            assert not (two / "checkpoints" / name / "optimizer.pt").exists()
            continue
        saved = torch.load(two / "checkpoints" / name / "optimizer.pt", weights_only=True)
        assert all(isinstance(key, str) for key in saved["state"])  # keyed by parameter name
        assert len(saved["state"]) == len(torch.load(one / "checkpoints" / name / "optimizer.pt",
                                                     weights_only=True)["state"])


@pytest.mark.parametrize("strategy", SHARDED)
def test_a_sharded_run_stopped_by_a_fault_resumes_under_torchrun_to_the_same_weights(tmp_path, tiny_base_dir,
                                                                                     chat_files, strategy):
    straight = tmp_path / "straight"
    assert run(straight, train_spec(straight, tiny_base_dir, chat_files, **OVERRIDES), 2, strategy).returncode == 0

    stopped = tmp_path / "stopped"
    spec = train_spec(stopped, tiny_base_dir, chat_files, **OVERRIDES)
    first = run(stopped, spec, 2, strategy, HANZO_ML_FAULT_NAN_AT_STEP="3")
    assert first.returncode != 0
    assert (stopped / "work" / "failure.json").is_file(), first.stderr[-4000:]
    assert (read_json(stopped / "work" / "failure.json")["kind"]) == "diverged"

    second = run(stopped, spec, 2, strategy, HANZO_ML_FAULT_NAN_AT_STEP="3")
    assert second.returncode == 0, second.stderr
    result = read_json(stopped / "work" / "result.json")
    assert (result["resumed_from_step"], result["steps"]) == (2, 4)
    assert_close_adapters(adapter(straight), adapter(stopped))


@pytest.mark.parametrize("strategy", SHARDED)
@pytest.mark.parametrize("method", ["qlora", "adalora", "dpo", "orpo"])
def test_sharding_a_method_it_cannot_shard_is_refused_before_any_model_is_loaded(method, strategy):
    from types import SimpleNamespace

    with pytest.raises(InputError, match=f"hardware.strategy: {strategy} runs methods full, lora; method {method} "
                                         "cannot be sharded .*: use ddp"):
        check_strategy(SimpleNamespace(strategy=strategy, processes=2), "job.json", method)
    check_strategy(SimpleNamespace(strategy=strategy, processes=1), "job.json", method)  # one process: no shards


def test_a_deepspeed_checkpoint_resumes_only_under_the_same_stage_and_process_count(tmp_path):
    from types import SimpleNamespace

    from hanzo_ml.distributed import load_deepspeed_state

    written_by = {"strategy": "deepspeed_zero2", "processes": 2}
    checkpoint = tmp_path / "step-00000002"
    (checkpoint / "deepspeed").mkdir(parents=True)
    for asks in (SimpleNamespace(strategy="ddp", processes=2), SimpleNamespace(strategy="deepspeed_zero3", processes=2),
                 SimpleNamespace(strategy="deepspeed_zero2", processes=4)):
        with pytest.raises(InputError, match=f"step-00000002: holds the DeepSpeed optimizer partitions of a "
                                             f"deepspeed_zero2 over 2 processes run; it resumes only as one "
                                             f"\\(this job asks for {asks.strategy} over {asks.processes} processes\\)"):
            load_deepspeed_state(object() if asks.strategy != "ddp" else None, checkpoint, written_by, asks)
    plain = tmp_path / "step-00000004"  # a ddp checkpoint: optimizer.pt, no deepspeed/
    plain.mkdir()
    with pytest.raises(InputError, match="step-00000004: written by a ddp over 2 processes run, whose optimizer state "
                                         "\\(optimizer.pt\\) a deepspeed run over several processes cannot split; "
                                         "resume it as it was written \\(hardware.strategy ddp, processes 2\\)"):
        load_deepspeed_state(object(), plain, {"strategy": "ddp", "processes": 2},
                             SimpleNamespace(strategy="deepspeed_zero2", processes=2))


def test_an_fsdp_resume_of_a_checkpoint_keyed_by_parameter_index_is_refused(tmp_path):
    from hanzo_ml.distributed import load_optimizer_state

    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    saved = optimizer.state_dict()  # by index, as one process or ddp writes it
    load_optimizer_state(model, torch.optim.AdamW(model.parameters()), saved, "step-00000002")  # unsharded: loads

    class Sharded(torch.nn.Linear):
        pass

    import hanzo_ml.distributed as distributed
    original = distributed.is_sharded
    distributed.is_sharded = lambda m: isinstance(m, Sharded)
    try:
        with pytest.raises(InputError, match="step-00000002: optimizer.pt was written by a single-process or ddp run"):
            load_optimizer_state(Sharded(2, 2), optimizer, saved, "step-00000002")
    finally:
        distributed.is_sharded = original


@pytest.mark.parametrize("strategy", ["deepspeed_zero2", "deepspeed_zero3"])
def test_the_deepspeed_config_fills_every_auto_from_the_job(strategy, tmp_path, monkeypatch):
    from types import SimpleNamespace

    import hanzo_ml.distributed as distributed

    hp = SimpleNamespace(batch_size=8, gradient_accumulation_steps=3, max_grad_norm=0.5)
    config = distributed.deepspeed_config(strategy, hp, distributed.World(rank=0, size=2), hidden_size=64)
    assert (config["train_micro_batch_size_per_gpu"], config["gradient_accumulation_steps"],
            config["train_batch_size"], config["gradient_clipping"]) == (4, 3, 24, 0.5)
    assert config["zero_optimization"]["stage"] == int(strategy[-1])
    assert config["managed_gradient_accumulation"] is False  # the loop hands over whole steps
    assert "auto" not in json.dumps(config)
    # an "auto" the trainer has no value for is named, with the file it came from
    (tmp_path / "zero2.json").write_text(json.dumps({"zero_optimization": {"stage": 2, "sub_group_size": "auto"}}))
    monkeypatch.setattr(distributed, "DEEPSPEED_CONFIGS", tmp_path)
    with pytest.raises(InputError, match=r"zero2.json: no value for \"auto\" at zero_optimization.sub_group_size"):
        distributed.deepspeed_config("deepspeed_zero2", hp, distributed.World(rank=0, size=2), hidden_size=64)
