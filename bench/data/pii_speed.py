"""PII masking speed on chat-length texts, and what libphonenumber's matcher would cost on the hot path.

    PYTHONPATH=trainer python bench/data/pii_speed.py [--records 100000]

The texts are bench/data/generate.py's messages (a tenth of the records carry one PII value), masked message by
message as the prepare chain does. phonenumbers.PhoneNumberMatcher is timed on a tenth of them: the masker uses a
regex for phone-shaped candidates and phonenumbers only to validate them. Times are CPU seconds of this process
(the machine is shared). Prints JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import phonenumbers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate import generate  # noqa: E402

from hanzo_ml.dataprep.pii import PII_KINDS, PiiMasker  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    args = ap.parse_args()
    records = [r for r, _ in generate(args.records, seed=5, exact=0.0, near=0.0, pii=0.1)]
    texts = [m["content"] for r in records for m in r["messages"]]
    masker = PiiMasker(PII_KINDS)
    start = time.process_time()
    found = sum(bool(masker.mask(t)[1]) for t in texts)
    all_kinds = time.process_time() - start
    phone_only = PiiMasker(["phone"])
    start = time.process_time()
    for t in texts:
        phone_only.mask(t)
    ours_phone = time.process_time() - start
    sample = texts[: len(texts) // 10]
    start = time.process_time()
    for t in sample:
        list(phonenumbers.PhoneNumberMatcher(t, "US"))
    matcher = (time.process_time() - start) * len(texts) / len(sample)
    print(json.dumps({
        "records": len(records), "texts": len(texts), "texts_with_pii": found,
        "all_kinds": {"seconds": round(all_kinds, 2), "records_per_s": round(len(records) / all_kinds)},
        "phone_regex_then_phonenumbers": {"seconds": round(ours_phone, 2), "records_per_s": round(len(records) / ours_phone)},
        "phonenumbers_matcher_estimated": {"seconds": round(matcher, 2), "records_per_s": round(len(records) / matcher),
                                           "timed_on_texts": len(sample)},
    }, indent=2))


if __name__ == "__main__":
    main()
