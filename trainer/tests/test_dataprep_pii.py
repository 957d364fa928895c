"""PII masking (mask_pii, rules tier): precision and recall per kind on the labelled corpus, and the masker's edges.

The corpus (tests/data/pii-corpus.jsonl, written by tests/data/make_pii_corpus.py) labels each value's span and
kind. A record's expected output is its text with every labelled span replaced by [REDACTED:<kind>]; per kind, a
true positive is a labelled value the masker replaced, a false negative one it left, a false positive a replacement
of that kind beyond the labelled ones (hard negatives have none).
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from hanzo_ml.dataprep.pii import PII_KINDS, PiiMasker

CORPUS = Path(__file__).parent / "data" / "pii-corpus.jsonl"
MIN_PRECISION = 0.95
MIN_RECALL = 0.95


def expected_text(row: dict) -> str:
    text = row["text"]
    for span in sorted(row["spans"], key=lambda s: s["start"], reverse=True):
        text = text[:span["start"]] + f"[REDACTED:{span['kind']}]" + text[span["end"]:]
    return text


def score(rows: list[dict]) -> tuple[dict[str, dict[str, float]], int]:
    masker = PiiMasker(PII_KINDS)
    tp, fp, fn = Counter(), Counter(), Counter()
    exact = 0
    for row in rows:
        masked, counts = masker.mask(row["text"])
        exact += masked == expected_text(row)
        for kind in PII_KINDS:
            gold = [s for s in row["spans"] if s["kind"] == kind]
            found = sum(row["text"][s["start"]:s["end"]] not in masked for s in gold)
            tp[kind] += found
            fn[kind] += len(gold) - found
            fp[kind] += max(0, counts.get(kind, 0) - found)
    table = {}
    for kind in PII_KINDS:
        p = tp[kind] / (tp[kind] + fp[kind]) if tp[kind] + fp[kind] else 1.0
        r = tp[kind] / (tp[kind] + fn[kind]) if tp[kind] + fn[kind] else 1.0
        table[kind] = {"precision": p, "recall": r, "support": tp[kind] + fn[kind], "false_positives": fp[kind]}
    return table, exact


def test_every_kind_reaches_the_precision_and_recall_floor_on_the_labelled_corpus(capsys):
    rows = [json.loads(line) for line in CORPUS.read_text().splitlines()]
    table, exact = score(rows)
    with capsys.disabled():
        print(f"\nPII corpus: {len(rows)} records, {exact} masked exactly as labelled")
        for kind, s in table.items():
            print(f"  {kind:16s} precision {s['precision']:.3f}  recall {s['recall']:.3f}  (support {s['support']}, false positives {s['false_positives']})")
    for kind, s in table.items():
        assert s["support"] >= 50, f"{kind}: the corpus holds too few examples"
        assert s["precision"] >= MIN_PRECISION, f"{kind}: precision {s['precision']:.3f}"
        assert s["recall"] >= MIN_RECALL, f"{kind}: recall {s['recall']:.3f}"
    assert exact / len(rows) >= 0.95


def test_the_hard_negatives_of_the_corpus_stay_as_they_are():
    rows = [json.loads(line) for line in CORPUS.read_text().splitlines()]
    masker = PiiMasker(PII_KINDS)
    changed = [row["text"] for row in rows if not row["spans"] and masker.mask(row["text"])[0] != row["text"]]
    assert len(changed) <= 0.02 * sum(1 for row in rows if not row["spans"]), changed


@pytest.mark.parametrize("text, kind, left", [
    ("card 4111 1111 1111 1111 please", "credit_card", "card [REDACTED:credit_card] please"),
    ("card 4111 1111 1111 1112 please", "credit_card", "card 4111 1111 1111 1112 please"),  # fails Luhn
    ("pay to GB82 WEST 1234 5698 7654 32", "iban", "pay to [REDACTED:iban]"),
    ("pay to GB83 WEST 1234 5698 7654 32", "iban", "pay to GB83 WEST 1234 5698 7654 32"),  # fails mod 97
    ("ssn 078-05-1121 on file", "us_ssn", "ssn [REDACTED:us_ssn] on file"),
    ("ssn 666-05-1121 on file", "us_ssn", "ssn 666-05-1121 on file"),  # area 666 is never issued
    ("from 10.1.2.3 at version 1.2.3.4", "ipv4", "from [REDACTED:ipv4] at version 1.2.3.4"),
    ("db postgres://admin:pw@db:5432/x", "url_credentials", "db postgres://[REDACTED:url_credentials]@db:5432/x"),
])
def test_a_value_is_masked_only_when_it_passes_its_kinds_rules(text, kind, left):
    assert PiiMasker([kind]).mask(text)[0] == left


def test_only_the_requested_kinds_are_masked_and_counted():
    text = "mail a@example.com from 10.0.0.1"
    assert PiiMasker(["email"]).mask(text) == ("mail [REDACTED:email] from 10.0.0.1", {"email": 1})
    assert PiiMasker(["ipv4", "email"]).mask(text) == ("mail [REDACTED:email] from [REDACTED:ipv4]", {"email": 1, "ipv4": 1})


def test_clean_text_comes_back_unchanged_with_no_counts():
    text = "How do I fine-tune a model on 2 GPUs with a batch size of 16?"
    assert PiiMasker(PII_KINDS).mask(text) == (text, {})


def test_an_unknown_kind_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"mask_pii\.kinds: unknown kind\(s\) passport"):
        PiiMasker(["email", "passport"])
