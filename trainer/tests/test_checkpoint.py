"""Checkpoint directories: atomic layout, manifest verification, resume choice, pruning."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from hanzo_ml.checkpoint import (LOCK_FILE, CheckpointSchedule, CorruptCheckpoint, best_checkpoint,
                                 find_resume_checkpoint, keep_as_best, latest_valid_checkpoint, prune_checkpoints,
                                 save_checkpoint, verify_checkpoint)
from hanzo_ml.files import sha256_file
from helpers import validate_against


def write_payload(text: str):
    def contents(directory: Path) -> None:
        (directory / "weights.bin").write_bytes(text.encode() * 100)
        (directory / "sub").mkdir()
        (directory / "sub" / "state.json").write_text(json.dumps({"text": text}))
    return contents


def test_a_checkpoint_gets_a_manifest_of_every_file(tmp_path):
    path = save_checkpoint(tmp_path, 40, write_payload("a"))
    assert path.name == "step-00000040"
    manifest = json.loads((path / "manifest.json").read_text())
    validate_against("checkpoint-manifest.schema.json", manifest)
    assert manifest["step"] == 40
    assert [f["path"] for f in manifest["files"]] == ["sub/state.json", "weights.bin"]
    assert manifest["files"][1]["size_bytes"] == 100
    assert verify_checkpoint(path).step == 40
    assert [p.name for p in tmp_path.iterdir()] == ["step-00000040"]  # no temp dir left behind


@pytest.mark.parametrize("damage, reason", [
    (lambda p: (p / "weights.bin").write_bytes(b"b" * 100), "sha256 does not match"),
    (lambda p: (p / "weights.bin").write_bytes(b"a" * 99), "99 bytes, manifest says 100"),
    (lambda p: (p / "sub" / "state.json").unlink(), "sub/state.json: missing"),
    (lambda p: (p / "manifest.json").unlink(), "no manifest.json"),
    (lambda p: (p / "manifest.json").write_text("{trunc"), "unreadable manifest.json"),
])
def test_damage_of_any_kind_fails_verification(tmp_path, damage, reason):
    path = save_checkpoint(tmp_path, 2, write_payload("a"))
    damage(path)
    with pytest.raises(CorruptCheckpoint, match=reason):
        verify_checkpoint(path)


def test_resume_skips_corrupt_and_incomplete_checkpoints_for_the_newest_valid_one(tmp_path, caplog):
    save_checkpoint(tmp_path, 2, write_payload("two"))
    save_checkpoint(tmp_path, 4, write_payload("four"))
    corrupt = save_checkpoint(tmp_path, 6, write_payload("six"))
    (corrupt / "weights.bin").write_bytes(b"x")
    (tmp_path / "step-00000008").mkdir()  # a directory with no manifest is not a checkpoint
    (tmp_path / ".tmp-step-00000010-123").mkdir()
    assert latest_valid_checkpoint(tmp_path).step == 4
    assert "skipping checkpoint step-00000008: no manifest.json" in caplog.text
    assert "skipping checkpoint step-00000006" in caplog.text


def test_no_checkpoint_means_a_fresh_start(tmp_path):
    assert latest_valid_checkpoint(tmp_path / "missing") is None
    assert latest_valid_checkpoint(tmp_path) is None


def test_pruning_keeps_the_newest_complete_checkpoints_and_removes_the_rest(tmp_path):
    for step in (2, 4, 6, 8):
        save_checkpoint(tmp_path, step, write_payload(str(step)))
    (tmp_path / "step-00000010").mkdir()             # incomplete: never renamed with a manifest
    (tmp_path / ".tmp-step-00000012-999").mkdir()    # left by a killed writer
    (tmp_path / "notes.txt").write_text("not ours")  # anything else is left alone
    prune_checkpoints(tmp_path, keep_last=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "step-00000006", "step-00000008"]


def test_writing_a_step_again_replaces_the_damaged_copy(tmp_path):
    path = save_checkpoint(tmp_path, 4, write_payload("old"))
    (path / "weights.bin").write_bytes(b"garbage")
    save_checkpoint(tmp_path, 4, write_payload("new"))
    assert verify_checkpoint(path).step == 4
    assert (path / "weights.bin").read_bytes() == b"new" * 100


def test_the_manifest_records_the_hash_of_the_environment_lock_file(tmp_path):
    manifest = json.loads((save_checkpoint(tmp_path, 1, write_payload("a")) / "manifest.json").read_text())
    assert manifest["environment"] == {"sha256": sha256_file(LOCK_FILE), "source": "requirements.lock"}


def test_resume_reports_each_checkpoint_it_skipped_and_why(tmp_path):
    save_checkpoint(tmp_path, 2, write_payload("two"))
    bad = save_checkpoint(tmp_path, 4, write_payload("four"))
    (bad / "weights.bin").write_bytes(b"y" * 400)
    found, skipped = find_resume_checkpoint(tmp_path)
    assert found.step == 2
    assert skipped == [("step-00000004", "weights.bin: sha256 does not match the manifest")]


def test_the_best_checkpoint_is_a_verified_copy_that_pruning_keeps(tmp_path):
    source = save_checkpoint(tmp_path, 2, write_payload("two"))
    keep_as_best(tmp_path, source, 1.25)
    for step in (4, 6, 8):
        save_checkpoint(tmp_path, step, write_payload(str(step)))
    prune_checkpoints(tmp_path, keep_last=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", "step-00000008"]
    best = best_checkpoint(tmp_path)
    assert (best.step, best.manifest["eval_loss"], best.manifest["copy_of"]) == (2, 1.25, "step-00000002")
    assert (tmp_path / "best" / "weights.bin").read_bytes() == b"two" * 100

    keep_as_best(tmp_path, tmp_path / "step-00000008", 0.5)  # a better one replaces it, leaving no temp dir
    assert best_checkpoint(tmp_path).step == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", "step-00000008"]
    (tmp_path / "best" / "weights.bin").write_bytes(b"z")
    assert best_checkpoint(tmp_path) is None  # a damaged best is never offered


def test_a_checkpoint_is_due_every_n_steps_after_the_interval_and_at_the_end():
    now = [0.0]
    schedule = CheckpointSchedule(every_steps=5, every_seconds=60, clock=lambda: now[0])
    assert [schedule.due(s, 12) for s in (1, 5, 12)] == [None, "steps", "end"]
    now[0] = 59.9
    assert schedule.due(3, 12) is None
    now[0] = 60.0
    assert schedule.due(3, 12) == "interval"
    schedule.written()
    now[0] = 100.0
    assert schedule.due(4, 12) is None
    assert CheckpointSchedule(every_steps=5, every_seconds=None, clock=lambda: 1e9).due(3, 12) is None
