"""Instruction following: each checker on an answer that follows its instruction and one that does not, the
instruction file's errors and the bundled set. The eval job's instruction scores: test_evaluate.py."""
from __future__ import annotations

import json

import pytest

from hanzo_ml.demo_data import INSTRUCTION_TEMPLATES, TEAMS, build_demo_files
from hanzo_ml.errors import InputError
from hanzo_ml.instructions import CHECKS, read_instructions
from helpers import REPO_DIR, write_jsonl

PROMPT = [{"role": "system", "content": "Route the message."},
          {"role": "user", "content": "My parcel is late. Answer in at most 2 words."}]


def record(kind: str, id: str = "if-1", **args) -> dict:
    return {"id": id, "messages": PROMPT, "instruction": {"kind": kind, **args}}


def followed(kind: str, answer: str, **args) -> bool:
    return CHECKS[kind].passes(answer, **args)


@pytest.mark.parametrize("kind, args, follows, breaks", [
    ("lowercase", {}, " shipping", "Shipping"),
    ("lowercase", {}, "returns team", "123"),                     # no letters: nothing was followed
    ("uppercase", {}, "SHIPPING", "shipping"),
    ("max_words", {"max_words": 2}, "the shipping", "the shipping team"),
    ("max_words", {"max_words": 2}, "billing", ""),               # an empty answer is not an answer
    ("include_word", {"word": "billing"}, "Billing team", "rebilling"),
    ("exclude_word", {"word": "billing"}, "rebilling is not a team", "billing."),
    ("starts_with", {"word": "returns"}, "Returns, I think", "the returns team"),
    ("ends_with", {"phrase": "team"}, "the shipping team.", "shipping steam"),
    ("no_comma", {}, "shipping", "shipping, I think"),
])
def test_each_checker_passes_an_answer_that_follows_it_and_fails_one_that_does_not(kind, args, follows, breaks):
    assert followed(kind, follows, **args)
    assert not followed(kind, breaks, **args)


def test_every_checker_has_a_case_above():
    kinds = {"lowercase", "uppercase", "max_words", "include_word", "exclude_word", "starts_with", "ends_with",
             "no_comma"}
    assert set(CHECKS) == kinds == set(INSTRUCTION_TEMPLATES)


@pytest.mark.parametrize("line, message", [
    ("{not json", "not valid JSON"),
    (json.dumps({**record("lowercase"), "id": ""}), "id: expected a non-empty string"),
    (json.dumps({**record("lowercase"), "messages": PROMPT + [{"role": "assistant", "content": "x"}]}),
     "messages[2].role: the prompt must end with the user's turn"),
    (json.dumps({**record("lowercase"), "messages": [{"role": "user"}]}), "messages[0].content"),
    (json.dumps({"id": "a", "messages": PROMPT}), "instruction: expected an object"),
    (json.dumps(record("shout")), "instruction.kind: expected one of lowercase, uppercase"),
    (json.dumps(record("max_words")), "instruction.max_words: max_words needs a positive integer, got null"),
    (json.dumps(record("max_words", max_words="2")), "instruction.max_words: max_words needs a positive integer"),
    (json.dumps(record("max_words", max_words=True)), "instruction.max_words: max_words needs a positive integer"),
    (json.dumps(record("include_word", word="")), "instruction.word: include_word needs a non-empty string"),
    (json.dumps(record("no_comma", word="x")), "instruction.word: not an argument of no_comma (it takes none)"),
])
def test_a_malformed_record_is_refused_naming_the_file_line_and_field(tmp_path, line, message):
    path = tmp_path / "instructions.jsonl"
    path.write_text(json.dumps(record("lowercase", id="if-0")) + "\n\n" + line + "\n", encoding="utf-8")
    with pytest.raises(InputError) as raised:
        read_instructions(path)
    assert str(raised.value).startswith(f"{path}:3: ")  # the blank line still counts: line 3 is the bad one
    assert message in str(raised.value)


def test_an_id_used_twice_is_refused(tmp_path):
    path = write_jsonl(tmp_path / "instructions.jsonl", [record("lowercase", id="a"), record("no_comma", id="a")])
    with pytest.raises(InputError, match=r"id: 'a' is used twice \(records 1 and 2\)"):
        read_instructions(path)


def test_the_bundled_set_reads_and_covers_every_kind_and_team_with_tickets_the_task_never_saw():
    records = read_instructions(REPO_DIR / "examples" / "heldout" / "instructions.jsonl")
    assert len(records) == 8 * len(CHECKS)
    assert {r.kind for r in records} == set(CHECKS)
    assert {r.args["word"] for r in records if r.kind == "include_word"} == set(TEAMS)
    task = build_demo_files().files["data/demo-task.jsonl"]
    tickets = {json.loads(line)["messages"][1]["content"] for line in task.splitlines()}
    openings = [text.split("{")[0] for text, _ in INSTRUCTION_TEMPLATES.values()]
    for r in records:
        message = r.messages[-1]["content"]
        ticket = message[:max(message.rfind(" " + opening) for opening in openings)]
        assert ticket and ticket not in tickets, r.id
