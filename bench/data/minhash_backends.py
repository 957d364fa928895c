"""Times the three MinHash candidates for the near-dedup hot path on the same texts (issue 24 item 4).

    PYTHONPATH=trainer python bench/data/minhash_backends.py [--records 100000]

rensa (Rust), datasketch (numpy per record, the reference) and our own numpy implementation that hashes a batch of
records' shingles at once; each gets the same lower-cased 5-word shingles, 112 permutations, seed 1. Times are CPU
seconds of this process (the machine is shared). Prints JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate import chat_texts  # noqa: E402

from hanzo_ml.dataprep.near_dedup import NumpyMinHash, shingles  # noqa: E402


def time_it(fn, texts) -> float:
    start = time.process_time()
    fn(texts)
    return time.process_time() - start


def run_datasketch(texts, num_perm=112, seed=1):
    from datasketch import MinHash
    for t in texts:
        m = MinHash(num_perm=num_perm, seed=seed)
        m.update_batch([s.encode() for s in shingles(t, 5)])
        m.digest()


def run_rensa(texts, num_perm=112, seed=1):
    from rensa import RMinHash
    for t in texts:
        m = RMinHash(num_perm=num_perm, seed=seed)
        m.update(shingles(t, 5))
        m.digest()


def run_numpy(texts, num_perm=112, seed=1):
    mh = NumpyMinHash(num_perm, seed)
    for i in range(0, len(texts), 1024):
        mh.signatures([shingles(t, 5) for t in texts[i:i + 1024]])


def run_shingles_only(texts):
    for t in texts:
        shingles(t, 5)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    args = ap.parse_args()
    texts = list(chat_texts(args.records, seed=7))
    words = np.mean([len(t.split()) for t in texts[:2000]])
    out = {"records": len(texts), "mean_words": round(float(words), 1)}
    for name, fn in (("shingling only", run_shingles_only), ("rensa", run_rensa), ("numpy (own)", run_numpy), ("datasketch", run_datasketch)):
        s = time_it(fn, texts)
        out[name] = {"seconds": round(s, 2), "records_per_s": round(len(texts) / s)}
        print(name, out[name], file=sys.stderr)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
