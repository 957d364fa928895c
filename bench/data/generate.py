"""Generated chat records with planted exact duplicates, near-duplicates and PII, in known numbers.

    PYTHONPATH=trainer python bench/data/generate.py --records 1000000 --out /tmp/chat.jsonl   # + chat.truth.json

A record is {"messages": [{"role": "user", ...}, {"role": "assistant", ...}]}: a question of 15-40 words and an
answer of 50-120 words drawn from a vocabulary of 20,000 words (Zipf-weighted), so two fresh records share almost
no 5-word shingle. ENGLISH_SHARE of the words are common English words (drawn uniformly from ENGLISH), the rest
made-up ones: a language filter for English keeps most records, as it would keep English chat (made-up words alone
read as no language at all). Planted, each a fraction of the records (flags):
  exact   a copy of an earlier record
  near    a copy of an earlier record with 1-2 answer words replaced (Jaccard of 5-word shingles >= ~0.82, above
          the default threshold 0.72)
  pii     one value in the question: email, phone, credit card (Luhn), US SSN, IPv4 or an AWS key id
The truth file holds those counts (PII values: copies included) and, per planted record, its line, its source
line and its PII kind.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import string
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import numpy as np
from stdnum import luhn

VOCAB_SIZE = 20_000
ENGLISH_SHARE = 0.6
ENGLISH = ("the of and to a in is you that it for on with as your are this be at by or from have not can will "
           "we an if my all has but our they which there was when what so about more one would their also how "
           "please account order help thanks could should need want know because after before then than these "
           "those into over just only very new time make like see use get here where who why some other any each "
           "many most much such both while again still even back through between under around without within "
           "payment refund shipping address update change password email reset support team issue problem").split()


def vocabulary(seed: int) -> list[str]:
    rng = random.Random(seed)
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + ["an", "el", "in", "or", "us", "ex"]
    words: set[str] = set()
    while len(words) < VOCAB_SIZE:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))))
    return sorted(words)


class TextSource:
    """Draws word sequences in bulk (numpy) so that a million records take seconds, not minutes."""

    def __init__(self, seed: int):
        self.words = vocabulary(seed) + list(dict.fromkeys(ENGLISH))
        self.english = len(dict.fromkeys(ENGLISH))
        weights = 1.0 / np.arange(1, VOCAB_SIZE + 1) ** 0.8
        self.p = weights / weights.sum()
        self.np_rng = np.random.default_rng(seed)
        self.buffer: list[int] = []
        self.pos = 0

    def take(self, n: int) -> list[str]:
        if self.pos + n > len(self.buffer):
            ids = self.np_rng.choice(VOCAB_SIZE, size=200_000, p=self.p)
            english = self.np_rng.random(200_000) < ENGLISH_SHARE
            ids[english] = VOCAB_SIZE + self.np_rng.integers(0, self.english, size=int(english.sum()))
            self.buffer = self.buffer[self.pos:] + ids.tolist()
            self.pos = 0
        ids = self.buffer[self.pos:self.pos + n]
        self.pos += n
        return [self.words[i] for i in ids]

    def sentence(self, n: int) -> str:
        words = self.take(n)
        return " ".join(words).capitalize() + "."


def chat_texts(n: int, seed: int) -> Iterator[str]:
    """Conversation texts alone (user turn, newline, assistant turn), for timing the MinHash back-ends."""
    src, rng = TextSource(seed), random.Random(seed)
    for _ in range(n):
        yield src.sentence(rng.randint(15, 40)) + "\n" + src.sentence(rng.randint(50, 120))


def luhn_number(rng: random.Random) -> str:
    body = "4" + "".join(rng.choice(string.digits) for _ in range(14))
    return body + luhn.calc_check_digit(body)


def grouped(digits: str) -> str:
    return " ".join(digits[i:i + 4] for i in range(0, len(digits), 4))


PII_MAKERS = {
    "email": lambda r: f"user{r.randint(1, 10**6)}@example.com",
    "phone": lambda r: f"({r.choice([212, 415, 617, 312, 206])}) {r.randint(201, 989)}-{r.randint(0, 9999):04d}",
    "credit_card": lambda r: grouped(luhn_number(r)),
    "us_ssn": lambda r: f"{r.choice([a for a in range(1, 900) if a != 666]):03d}-{r.randint(1, 99):02d}-{r.randint(1, 9999):04d}",
    # public addresses: datatrove masks only those, so the two sides can be compared on them
    "ipv4": lambda r: f"{r.choice([34, 52, 81, 93, 145, 185])}.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(1, 254)}",
    "secret": lambda r: "AKIA" + "".join(r.choice(string.ascii_uppercase + string.digits) for _ in range(16)),
}


def near_copy(record: dict, src: TextSource, rng: random.Random) -> dict:
    words = record["messages"][1]["content"].split(" ")
    # One change in a short answer, up to two in a long one: the pair's Jaccard stays >= ~0.82 (5-word shingles).
    for _ in range(1 if len(words) < 90 else rng.randint(1, 2)):
        words[rng.randrange(1, len(words) - 1)] = src.take(1)[0]
    return {"messages": [record["messages"][0], {"role": "assistant", "content": " ".join(words)}]}


def generate(n: int, seed: int, exact: float, near: float, pii: float) -> Iterator[tuple[dict, dict | None]]:
    """Yields (record, truth entry or None). Planted copies come from the last 10,000 fresh records (a window, so
    that the generator's memory does not grow with n)."""
    src, rng = TextSource(seed), random.Random(seed)
    window: list[dict] = []
    window_lines: list[int] = []
    window_pii: list[str | None] = []
    for line in range(1, n + 1):
        roll = rng.random()
        if window and roll < exact:
            k = rng.randrange(len(window))
            yield window[k], {"line": line, "planted": "exact", "of": window_lines[k], "kind": window_pii[k]}
            continue
        if window and roll < exact + near:
            k = rng.randrange(len(window))
            yield near_copy(window[k], src, rng), {"line": line, "planted": "near", "of": window_lines[k], "kind": window_pii[k]}
            continue
        question = src.sentence(rng.randint(15, 40))
        truth, kind = None, None
        if rng.random() < pii:
            kind = rng.choice(sorted(PII_MAKERS))
            question = question[:-1] + f", my {kind.replace('_', ' ')} is {PII_MAKERS[kind](rng)}."
            truth = {"line": line, "planted": "pii", "kind": kind}
        record = {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": src.sentence(rng.randint(50, 120))}]}
        if len(window) < 10_000:
            window.append(record)
            window_lines.append(line)
            window_pii.append(kind)
        else:
            k = rng.randrange(10_000)
            window[k], window_lines[k], window_pii[k] = record, line, kind
        yield record, truth


def generated_input(work: Path, records: int) -> Path:
    """The benches' input of `records` records in `work`, generated once for each version of this generator: the
    hash of its source names the file, so a file an older generator made is never taken for today's. The truth file
    is written last, so an interrupted generation is made again."""
    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    data = work / f"chat-{records}-{digest}.jsonl"
    if not data.with_suffix(".truth.json").exists():
        work.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "trainer")}
        subprocess.run([sys.executable, __file__, "--records", str(records), "--out", str(data)], check=True, env=env)
    return data


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=24)
    ap.add_argument("--exact", type=float, default=0.05, help="fraction of records that are exact copies")
    ap.add_argument("--near", type=float, default=0.05, help="fraction that are near copies")
    ap.add_argument("--pii", type=float, default=0.10, help="fraction of fresh records holding one PII value")
    args = ap.parse_args()
    # pii: values in the input, copies included (an exact or near copy of a record repeats its value)
    counts = {"exact": 0, "near": 0, "pii": {}}
    planted = []
    with args.out.open("w") as f:
        for record, truth in generate(args.records, args.seed, args.exact, args.near, args.pii):
            f.write(json.dumps(record) + "\n")
            if truth:
                planted.append(truth)
                if truth["planted"] != "pii":
                    counts[truth["planted"]] += 1
                if truth.get("kind"):
                    counts["pii"][truth["kind"]] = counts["pii"].get(truth["kind"], 0) + 1
    truth_path = args.out.with_suffix(".truth.json")
    truth_path.write_text(json.dumps({"records": args.records, "seed": args.seed, "counts": counts, "planted": planted}))
    print(json.dumps({"records": args.records, "counts": counts, "out": str(args.out), "truth": str(truth_path)}))


if __name__ == "__main__":
    main()
