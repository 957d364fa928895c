"""Near-duplicate removal (dedup_near): planted near-duplicates go, distinct records stay, the result is the same
for the same seed, the disk-backed index gives what the in-memory batch gives, and the candidate pairs agree with
datasketch's MinHashLSH (the reference implementation) on the same input."""
from __future__ import annotations

import random

import pytest
from datasketch import MinHash, MinHashLSH

from hanzo_ml.dataprep.near_dedup import BucketBloom, NearDuplicateFilter, shingles

PARAMS = {"shingle_words": 5, "bands": 14, "rows": 8, "threshold": 0.72, "seed": 1}
WORDS = [f"w{i}" for i in range(5000)]


def jaccard(a: str, b: str) -> float:
    x, y = set(shingles(a, 5)), set(shingles(b, 5))
    return len(x & y) / len(x | y)


def fresh(rng: random.Random, n_words: int = 150) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def edited(rng: random.Random, text: str, changes: int) -> str:
    words = text.split()
    for i in rng.sample(range(len(words)), changes):
        words[i] = rng.choice(WORDS) + "x"
    return " ".join(words)


def corpus(n: int, seed: int) -> tuple[list[str], set[int]]:
    """n records: fresh texts, and near copies of earlier fresh ones with 1-2 of 150 words changed (Jaccard >= 0.87,
    far enough above 0.72 that 112 permutations' estimate does not fall below it).
    Returns the texts and the indices of the near copies."""
    rng = random.Random(seed)
    texts, copies, originals = [], set(), []
    for i in range(n):
        if originals and rng.random() < 0.2:
            texts.append(edited(rng, rng.choice(originals), rng.randint(1, 2)))
            copies.add(i)
        else:
            texts.append(fresh(rng))
            originals.append(texts[-1])
    return texts, copies


def run(texts: list[str], tmp_path, memory_budget_mb: int = 256) -> tuple[list[bool], dict]:
    f = NearDuplicateFilter(**PARAMS, work_dir=tmp_path, memory_budget_mb=memory_budget_mb)
    flags = [f.is_duplicate(t) for t in texts]
    stats = f.stats()
    f.close()
    return flags, stats


def test_planted_near_duplicates_are_removed_and_distinct_records_kept(tmp_path):
    texts, copies = corpus(1500, seed=3)
    flags, stats = run(texts, tmp_path)
    assert {i for i, dup in enumerate(flags) if dup} == copies
    assert stats["duplicates"] == len(copies) and stats["kept"] == len(texts) - len(copies)
    assert 0 < stats["clusters"] <= len(copies)


def test_a_pair_below_the_threshold_is_kept_and_one_above_it_is_removed(tmp_path):
    rng = random.Random(5)
    base = fresh(rng, 200)
    far = edited(rng, base, 12)   # about 60 of 196 shingles changed
    near = edited(rng, base, 3)
    assert jaccard(base, far) < 0.6 and jaccard(base, near) > 0.85
    assert run([base, far], tmp_path)[0] == [False, False]
    assert run([base, near], tmp_path)[0] == [False, True]


def test_the_same_seed_and_input_give_the_same_result_and_clean_up_their_index(tmp_path):
    texts, _ = corpus(800, seed=4)
    first, second = run(texts, tmp_path), run(texts, tmp_path)
    assert first == second
    assert list(tmp_path.iterdir()) == []


def test_the_index_written_to_disk_in_batches_decides_as_the_unwritten_one_does(tmp_path):
    texts, copies = corpus(3000, seed=6)
    in_memory = run(texts, tmp_path, memory_budget_mb=4096)      # one batch, never flushed before the end
    on_disk = run(texts, tmp_path, memory_budget_mb=1)           # 1,000-record batches, read back from SQLite
    assert on_disk == in_memory
    assert {i for i, dup in enumerate(on_disk[0]) if dup} == copies


def test_a_record_near_a_reference_is_a_duplicate_and_the_reference_is_never_kept(tmp_path):
    rng = random.Random(8)
    earlier = fresh(rng)
    f = NearDuplicateFilter(**PARAMS, work_dir=tmp_path, memory_budget_mb=64)
    f.add_reference(earlier)
    assert f.is_duplicate(edited(rng, earlier, 1)) is True
    assert f.is_duplicate(fresh(rng)) is False
    stats = f.stats()
    f.close()
    assert (stats["references"], stats["kept"], stats["duplicates_of_references"]) == (1, 1, 1)


def test_a_threshold_outside_0_to_1_is_refused_naming_the_field(tmp_path):
    with pytest.raises(ValueError, match=r"dedup_near\.threshold"):
        NearDuplicateFilter(**{**PARAMS, "threshold": 1.5}, work_dir=tmp_path, memory_budget_mb=64)


class PairRecorder(NearDuplicateFilter):
    """Records the (record, kept record) pairs that shared a bucket, by input index."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pairs: set[tuple[int, int]] = set()
        self.index_of_rid: dict[int, int] = {}

    def _candidates(self, keys):
        rids = super()._candidates(keys)
        current = self.counts["records"] - 1
        self.pairs.update((current, self.index_of_rid[r]) for r in rids)
        return rids

    def _index(self, rid, sig, keys):
        self.index_of_rid[rid] = self.counts["records"] - 1
        super()._index(rid, sig, keys)


def datasketch_pairs(texts: list[str], seed: int) -> set[tuple[int, int]]:
    num_perm = PARAMS["bands"] * PARAMS["rows"]
    lsh = MinHashLSH(num_perm=num_perm, params=(PARAMS["bands"], PARAMS["rows"]))
    kept: dict[int, MinHash] = {}
    pairs = set()
    for i, text in enumerate(texts):
        m = MinHash(num_perm=num_perm, seed=seed)
        m.update_batch([s.encode() for s in shingles(text, PARAMS["shingle_words"])])
        candidates = lsh.query(m)
        pairs.update((i, c) for c in candidates)
        if not any(m.jaccard(kept[c]) >= PARAMS["threshold"] for c in candidates):
            lsh.insert(i, m)
            kept[i] = m
    return pairs


def our_pairs(texts: list[str], tmp_path) -> set[tuple[int, int]]:
    ours = PairRecorder(**PARAMS, work_dir=tmp_path, memory_budget_mb=64)
    for t in texts:
        ours.is_duplicate(t)
    ours.close()
    return ours.pairs


def agreement(a: set, b: set) -> float:
    return len(a & b) / len(a | b)


def test_candidate_pairs_agree_with_datasketch_minhash_lsh_on_at_least_99_percent(tmp_path, capsys):
    # What near dedup meets: fresh records, near copies (1-2 of 150 words changed) and loose rewrites (40-75
    # changed: Jaccard below 0.3).
    rng = random.Random(11)
    texts, copies = corpus(1500, seed=12)
    texts += [edited(rng, t, rng.randint(40, 75)) for t in rng.sample(texts, 300)]
    ours, reference = our_pairs(texts, tmp_path), datasketch_pairs(texts, PARAMS["seed"])
    with capsys.disabled():
        print(f"\ncandidate pairs: ours {len(ours)}, datasketch {len(reference)}, agreement {agreement(ours, reference):.4f}")
    assert len(reference) >= len(copies)
    assert agreement(ours, reference) >= 0.99


def test_on_the_lsh_s_curve_ours_agrees_with_datasketch_as_datasketch_agrees_with_itself_under_another_seed(tmp_path, capsys):
    # Pairs with Jaccard 0.4-0.8 share a bucket by chance (14 x 8 bands: 2% to 95%), so any two MinHash hash
    # families disagree on some of them; rensa's must disagree with datasketch's no more than a reseeded datasketch.
    rng = random.Random(13)
    texts = []
    for _ in range(300):
        base = fresh(rng)
        texts.append(base)
        texts.extend(edited(rng, base, rng.choice([3, 5, 8, 12])) for _ in range(2))
    reference = datasketch_pairs(texts, PARAMS["seed"])
    ours, reseeded = our_pairs(texts, tmp_path), datasketch_pairs(texts, PARAMS["seed"] + 1)
    with capsys.disabled():
        print(f"\nS-curve pairs: ours vs datasketch {agreement(ours, reference):.3f}, datasketch seed 2 vs seed 1 {agreement(reseeded, reference):.3f}")
    assert agreement(ours, reference) >= agreement(reseeded, reference) - 0.05


def test_the_bloom_filter_of_bucket_keys_never_misses_a_key_even_when_overfull():
    rng = random.Random(21)
    bloom = BucketBloom(1)  # the smallest filter (2^16 bits) holding 50,000 keys: many "maybe"s, never a miss
    keys = [rng.getrandbits(64) - (1 << 63) for _ in range(50_000)]
    bloom.add(keys)
    assert all(bloom.may_contain(keys))
    roomy = BucketBloom(1 << 20)
    roomy.add(keys)
    absent = [rng.getrandbits(64) - (1 << 63) for _ in range(10_000)]
    assert sum(roomy.may_contain(absent)) < 50  # 2^23 bits, 50,000 keys: about 0.01% answer "maybe"


def chunk_run(texts: list[str], tmp_path, memory_budget_mb: int, chunk: int) -> tuple[list[bool], dict]:
    """The engine's way: signatures made a chunk at a time (signer), decided a chunk at a time (duplicates)."""
    f = NearDuplicateFilter(**PARAMS, work_dir=tmp_path, memory_budget_mb=memory_budget_mb)
    sign = f.signer()
    flags = [dup for i in range(0, len(texts), chunk) for dup in f.duplicates(sign(texts[i:i + chunk]))]
    stats = f.stats()
    f.close()
    return flags, stats


@pytest.mark.parametrize("memory_budget_mb", [1, 4096])
def test_deciding_a_chunk_at_once_decides_as_one_record_at_a_time_does(tmp_path, memory_budget_mb):
    # Copies right after their original (inside one chunk), far from it (across chunks and flushes), texts without
    # words; chunks of 256 as the engine sends them and of 7, so that batches are flushed in the middle of a chunk.
    texts, copies = corpus(2500, seed=8)
    rng = random.Random(9)
    for at in sorted(rng.sample(range(len(texts)), 40), reverse=True):
        texts.insert(at + 1, edited(rng, texts[at], 1))
    for at in rng.sample(range(len(texts)), 10):
        texts[at] = "   "
    one_at_a_time = run(texts, tmp_path, memory_budget_mb)
    for chunk in (256, 7):
        assert chunk_run(texts, tmp_path, memory_budget_mb, chunk) == one_at_a_time
    assert sum(one_at_a_time[0]) >= len(copies)


def test_the_bloom_filter_asked_for_an_array_answers_as_for_a_list():
    import numpy as np

    rng = random.Random(22)
    keys = [rng.getrandbits(64) - (1 << 63) for _ in range(5_000)]
    by_list, by_array = BucketBloom(1 << 12), BucketBloom(1 << 12)
    by_list.add(keys)
    by_array.add_matrix(np.array(keys, dtype=np.int64).reshape(-1, 10))
    assert by_array.bits == by_list.bits
    probe = keys[:2000] + [rng.getrandbits(64) - (1 << 63) for _ in range(20_000)]
    assert by_list.may_contain_matrix(np.array(probe, dtype=np.int64)).tolist() == by_list.may_contain(probe)


def test_a_batch_written_a_slice_at_a_time_decides_as_one_written_whole(tmp_path, monkeypatch):
    from hanzo_ml.dataprep import near_dedup

    texts, _ = corpus(3000, seed=6)
    whole = run(texts, tmp_path, memory_budget_mb=1)
    monkeypatch.setattr(near_dedup, "FLUSH_ROWS", 5)
    assert run(texts, tmp_path, memory_budget_mb=1) == whole
