"""The bundled demo files: reproducible from the generator, and shaped the way the demo needs them."""
from __future__ import annotations

import collections
import csv
import io

from hanzo_ml.chat import parse_record
from hanzo_ml.cli import main
from hanzo_ml.demo_data import SYSTEM_PROMPT, TEAMS, build_demo_files
from helpers import REPO_DIR

FILES = build_demo_files().files


def test_the_committed_examples_are_exactly_what_the_generator_writes(tmp_path):
    assert main(["make-demo-data", "--out", str(tmp_path)]) == 0
    for relative, text in FILES.items():
        assert (tmp_path / relative).read_text(encoding="utf-8") == text
        assert (REPO_DIR / "examples" / relative).read_text(encoding="utf-8") == text, \
            f"examples/{relative} drifted: run `python -m hanzo_ml make-demo-data`"


def test_the_task_has_about_two_percent_exact_duplicates_and_balanced_valid_answers():
    lines = FILES["data/demo-task.jsonl"].splitlines()
    assert 600 <= len(lines) <= 1500
    duplicates = len(lines) - len(set(lines))
    assert 0.015 <= duplicates / len(lines) <= 0.025
    records = [parse_record(line, f"demo-task.jsonl:{i}") for i, line in enumerate(lines, 1)]
    answers = collections.Counter(r[-1]["content"] for r in records)
    assert set(answers) == set(TEAMS)
    assert max(answers.values()) - min(answers.values()) <= 0.05 * len(lines)
    assert all(r[0] == {"role": "system", "content": SYSTEM_PROMPT} for r in records)


def test_the_corpus_speaks_the_domain_but_never_in_the_task_format():
    corpus = "".join(text for name, text in FILES.items() if name.startswith("corpus/"))
    assert 100_000 < len(corpus.encode()) < 500_000
    assert SYSTEM_PROMPT not in corpus and "<|" not in corpus
    for team in TEAMS:
        assert corpus.count(team) > 100
    messages = {parse_record(line, "x")[1]["content"] for line in FILES["data/demo-task.jsonl"].splitlines()}
    assert not any(message in corpus for message in list(messages)[:200])


def test_the_csv_sample_has_instruction_and_response_columns():
    rows = list(csv.DictReader(io.StringIO(FILES["data/demo-task.csv"])))
    assert 45 <= len(rows) <= 55
    assert set(rows[0]) == {"instruction", "response"}
    assert {row["response"] for row in rows} == set(TEAMS)
