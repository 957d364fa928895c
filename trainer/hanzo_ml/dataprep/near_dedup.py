"""Near-duplicate removal (dedup_near): MinHash over lower-cased word shingles, LSH over bands x rows.

A record is a duplicate when it shares a band bucket with a kept (or reference) record and their MinHash signatures
agree on at least `threshold` of the permutations (the MinHash estimate of their Jaccard similarity). The first of
a near-duplicate group is kept. The result depends only on the seed and the input order.

Memory stays within `memory_budget_mb` whatever the input size: band buckets and the signatures of kept records
live in an SQLite file in `work_dir`; what is held in memory is the batch not yet written (flushed in one
transaction when it reaches its share of the budget), SQLite's page cache and a fixed-size Bloom filter of the bucket
keys (both sized from the budget) that spares the SQLite lookup for the records that share no bucket (most). The
unwritten batch is compact (about 2 KiB a record: its signature a row of one preallocated matrix, its bucket keys
entries of one int -> int dict, a list only for a key two records share), so it holds few objects for the garbage
collector to walk.

The engine decides a chunk of records at a time (duplicates()): the Bloom filter is asked for the whole chunk in
one numpy pass, and only the records it may hold a bucket of (the duplicates, a few false "maybe"s) are looked up one
by one; the others are kept a run at a time, with dict updates from arrays. The decisions are
is_duplicate_signed's, record by record.

The signatures come from rensa (Rust) because it was the fastest of the three candidates on the same 100,000
chat-length texts and is deterministic for a seed (bench/data/minhash_backends.py, bench/results/data.md):
rensa's RMinHash, datasketch's MinHash (the reference the tests compare against), and NumpyMinHash below (our own,
vectorized over a batch of records, kept for that comparison).
"""
from __future__ import annotations

import os
import sqlite3
import tempfile
from itertools import chain
from pathlib import Path
from typing import Iterator, NamedTuple

import numpy as np
import xxhash
from rensa import RMinHash

_MERSENNE = np.uint64((1 << 61) - 1)
_MAX32 = np.uint64(0xFFFFFFFF)
# Bucket rows made into Python ints at a time when a batch is written: the whole batch at once (bands rows per kept
# record, 917,504 at 1024 MB) added about 70 MB to the peak of the process for the moment of the write.
FLUSH_ROWS = 65_536
# Bucket rows one INSERT statement names: SQLite's per-statement work (and the binding of a tuple a row) done once
# for that many rows, half the cost of a batch's write against a statement a row.
ROWS_A_STATEMENT = 256


def shingles(text: str, shingle_words: int) -> list[str]:
    """Lower-cased runs of `shingle_words` consecutive words; a shorter text is one shingle of all its words."""
    words = text.lower().split()
    if len(words) <= shingle_words:
        return [" ".join(words)] if words else []
    return list(map(" ".join, zip(*(words[i:] for i in range(shingle_words)))))


def signature(text: str, shingle_words: int, num_perm: int, seed: int) -> np.ndarray | None:
    grams = shingles(text, shingle_words)
    if not grams:
        return None
    m = RMinHash(num_perm=num_perm, seed=seed)
    m.update(grams)
    return np.asarray(m.digest(), dtype=np.uint32)


def band_keys(sig: np.ndarray, bands: int, rows: int) -> list[int]:
    """One signed 64-bit key per band (SQLite's INTEGER), the band's index mixed into the hash."""
    raw = sig.tobytes()
    width = rows * 4
    return [xxhash.xxh64_intdigest(raw[b * width:(b + 1) * width], seed=b) - (1 << 63) for b in range(bands)]


class SignedChunk(NamedTuple):
    """The signatures and band keys of a chunk of texts, one row each (present: False for a text without words),
    as three arrays: they cross between processes as three buffers, not as an object per record."""
    sigs: np.ndarray     # (texts, num_perm) uint32
    keys: np.ndarray     # (texts, bands) int64
    present: np.ndarray  # (texts,) bool

    def each(self) -> Iterator[tuple[np.ndarray, list[int]] | None]:
        """(signature, band keys) or None for each text, in order: is_duplicate_signed's argument."""
        for sig, keys, present in zip(self.sigs, self.keys.tolist(), self.present.tolist()):
            yield (sig, keys) if present else None


class NumpyMinHash:
    """datasketch's permutation scheme ((a*h + b) mod 2^61-1, 32-bit values) over xxh32 shingle hashes, computed for
    a batch of records in one matrix. Only the back-end comparison uses it."""

    def __init__(self, num_perm: int, seed: int):
        gen = np.random.RandomState(seed)
        self.a = gen.randint(1, int(_MERSENNE), size=num_perm, dtype=np.uint64)
        self.b = gen.randint(0, int(_MERSENNE), size=num_perm, dtype=np.uint64)
        self.num_perm = num_perm

    def signatures(self, docs: list[list[str]]) -> np.ndarray:
        lengths = np.array([max(1, len(d)) for d in docs])
        hashes = np.fromiter((xxhash.xxh32_intdigest(s.encode()) for d in docs for s in (d or [""])), dtype=np.uint64, count=int(lengths.sum()))
        permuted = ((hashes[:, None] * self.a + self.b) % _MERSENNE) & _MAX32  # (shingles, num_perm)
        offsets = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        return np.minimum.reduceat(permuted, offsets, axis=0).astype(np.uint32)  # (docs, num_perm)


class BucketBloom:
    """A Bloom filter of bucket keys with two probes per key (the key's halves: keys are xxh64 values, already
    mixed), of a fixed size: a full one answers "maybe" more often and costs lookups, never a wrong answer.
    At 1 GiB of budget (2^29 bits) and 14 million keys, about 0.2% of absent keys answer "maybe". Plain Python
    over a bytearray: for 14 keys a record that beats numpy's per-call overhead."""

    def __init__(self, size_bytes: int):
        nbits = 1 << max(16, (size_bytes * 8).bit_length() - 1)  # a power of two, for masking
        self.mask = nbits - 1
        self.bits = bytearray(nbits // 8)

    def add(self, keys: list[int]) -> None:
        bits, mask = self.bits, self.mask
        for k in keys:
            for p in (k & mask, (k >> 32) & mask):
                bits[p >> 3] |= 1 << (p & 7)

    def may_contain(self, keys: list[int]) -> list[bool]:
        bits, mask = self.bits, self.mask
        out = []
        for k in keys:
            p, q = k & mask, (k >> 32) & mask
            out.append(bool(bits[p >> 3] & (1 << (p & 7))) and bool(bits[q >> 3] & (1 << (q & 7))))
        return out

    def _positions(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mask = np.int64(self.mask)
        return keys & mask, (keys >> np.int64(32)) & mask  # int64 shifts and masks as Python's ints do

    def add_matrix(self, keys: np.ndarray) -> None:
        """add() for an array of keys at once."""
        view = np.frombuffer(self.bits, dtype=np.uint8)
        for p in self._positions(keys.ravel()):
            np.bitwise_or.at(view, p >> 3, (np.int64(1) << (p & 7)).astype(np.uint8))

    def may_contain_matrix(self, keys: np.ndarray) -> np.ndarray:
        """may_contain() for an array of keys at once, in its shape."""
        view = np.frombuffer(self.bits, dtype=np.uint8)
        p, q = self._positions(keys)
        return ((view[p >> 3] >> (p & 7).astype(np.uint8)) & (view[q >> 3] >> (q & 7).astype(np.uint8)) & 1) != 0


class NearDuplicateFilter:
    """Streams records through MinHash LSH; see the module docstring for what counts as a duplicate."""

    def __init__(self, shingle_words: int, bands: int, rows: int, threshold: float, seed: int, work_dir: str | Path,
                 memory_budget_mb: int):
        if not 0 < threshold <= 1:
            raise ValueError(f"dedup_near.threshold: {threshold} is outside (0, 1]")
        self.shingle_words, self.bands, self.rows = shingle_words, bands, rows
        self.num_perm = bands * rows
        self.threshold, self.seed = threshold, seed
        Path(work_dir).mkdir(parents=True, exist_ok=True)
        fd, self.db_path = tempfile.mkstemp(prefix="near-dedup-", suffix=".sqlite", dir=work_dir)
        os.close(fd)
        self.db = sqlite3.connect(self.db_path, isolation_level=None)
        self._setup(memory_budget_mb)
        # A kept record costs about 2 KiB until it is written (a signature row, bands entries of the bucket dict):
        # an eighth of the budget holds the unwritten batch, an eighth is SQLite's page cache (_setup), a sixteenth
        # the Bloom filter of bucket keys; the rest is the process itself and the other stages' parts.
        self.batch_limit = max(1000, memory_budget_mb * 1024 // 8 // 2)
        self.bloom = BucketBloom(memory_budget_mb * (1 << 20) // 16)
        self.pending_first: dict[int, int] = {}  # bucket key -> the first unwritten record under it
        self.pending_more: dict[int, list[int]] = {}  # bucket key -> the other unwritten records under it (rare)
        self.pending_rows: dict[int, int] = {}  # record id -> its row of pending_matrix
        self.pending_matrix = np.empty((self.batch_limit, self.num_perm), dtype=np.uint32)
        self.pending_clusters: set[int] = set()
        self.unbloomed: list[np.ndarray] = []  # band keys indexed by duplicates() and not yet in the Bloom filter
        self.next_kept, self.next_reference = 1, -1
        self.counts = {"records": 0, "kept": 0, "duplicates": 0, "duplicates_of_references": 0, "references": 0, "candidate_pairs": 0}

    def _setup(self, memory_budget_mb: int) -> None:
        self.db.executescript(f"""
            PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA temp_store = FILE;
            PRAGMA cache_size = -{memory_budget_mb * 1024 // 8};
            CREATE TABLE buckets (bkey INTEGER NOT NULL, rid INTEGER NOT NULL, PRIMARY KEY (bkey, rid)) WITHOUT ROWID;
            CREATE TABLE sigs (rid INTEGER PRIMARY KEY, sig BLOB NOT NULL);
            CREATE TABLE clusters (rid INTEGER PRIMARY KEY);
        """)

    # ---- signatures and bands ----

    def signature(self, text: str) -> np.ndarray | None:
        return signature(text, self.shingle_words, self.num_perm, self.seed)

    def band_keys(self, sig: np.ndarray) -> list[int]:
        return band_keys(sig, self.bands, self.rows)

    def signer(self):
        """A function texts -> SignedChunk, for the worker processes: the per-record half of is_duplicate, which
        depends on nothing but the text and the parameters."""
        shingle_words, num_perm, seed, bands, rows = self.shingle_words, self.num_perm, self.seed, self.bands, self.rows

        def sign(texts: list[str]) -> SignedChunk:
            sigs = np.zeros((len(texts), num_perm), dtype=np.uint32)
            keys = np.zeros((len(texts), bands), dtype=np.int64)
            present = np.zeros(len(texts), dtype=bool)
            for i, text in enumerate(texts):
                sig = signature(text, shingle_words, num_perm, seed)
                if sig is not None:
                    sigs[i], keys[i], present[i] = sig, band_keys(sig, bands, rows), True
            return SignedChunk(sigs, keys, present)
        return sign

    # ---- the interface the prepare-dataset engine calls ----

    def is_duplicate(self, text: str) -> bool:
        """True when `text` is near an earlier kept or reference record (it is then not kept); False: kept and indexed.
        A text without words is never a near-duplicate (exact dedup handles empty records)."""
        sig = self.signature(text)
        return self.is_duplicate_signed(None if sig is None else (sig, self.band_keys(sig)))

    def is_duplicate_signed(self, signed: tuple[np.ndarray, list[int]] | None) -> bool:
        """is_duplicate for a text whose (signature, band keys) a signer() made: the order-dependent half, which
        runs in one process, record after record."""
        self.counts["records"] += 1
        if signed is None:
            self.counts["kept"] += 1
            return False
        sig, keys = signed
        match = self._best_match(sig, keys)
        if match is not None:
            self.counts["duplicates"] += 1
            self.counts["duplicates_of_references"] += match < 0
            self.pending_clusters.add(match)
            return True
        self._index(self.next_kept, sig, keys)
        self.next_kept += 1
        self.counts["kept"] += 1
        return False

    def duplicates(self, signed: SignedChunk) -> list[bool]:
        """is_duplicate_signed for each text of a chunk, in order, with the same decisions. The Bloom filter is
        asked for the whole chunk at once, and a text sharing a band key with an earlier text of the chunk counts
        as "maybe" too (that one may be indexed by then); only those and the texts without words take
        is_duplicate_signed. The texts between two of them (most) share no band key with anything indexed, so they
        are kept as a run, indexed with a few array operations (_keep_run), their band keys added to the filter
        with the chunk's other kept ones at the end (the lookups in between find them in the unwritten batch)."""
        keys = signed.keys
        n = len(keys)
        if n == 0:
            return []
        maybe = self.bloom.may_contain_matrix(keys).any(axis=1)
        _, first, inverse = np.unique(keys.ravel(), return_index=True, return_inverse=True)
        first_text = (first // keys.shape[1])[inverse.reshape(-1)].reshape(keys.shape)
        maybe |= (first_text < np.arange(n)[:, None]).any(axis=1)
        maybe |= ~signed.present
        out = [False] * n
        start = 0
        for at in [*np.flatnonzero(maybe).tolist(), n]:
            if at > start:
                self._keep_run(signed.sigs[start:at], keys[start:at])
            if at < n:
                out[at] = self.is_duplicate_signed((signed.sigs[at], keys[at].tolist()) if signed.present[at] else None)
            start = at + 1
        self._add_unbloomed()
        return out

    def _keep_run(self, sigs: np.ndarray, keys: np.ndarray) -> None:
        """Keeps and indexes texts none of whose band keys is indexed yet (nor shared among them): _index's work
        for each, as dict updates from arrays, the Bloom filter's left to _add_unbloomed."""
        while len(sigs):
            row = len(self.pending_rows)
            take = min(len(sigs), self.batch_limit - row)
            rids = list(range(self.next_kept, self.next_kept + take))
            # each record's id object repeated for its keys (zip of the same list), not an int a key: 13 ints a
            # record fewer in the batch (about 27 MB at 1024 MB)
            self.pending_first.update(zip(keys[:take].ravel().tolist(), chain.from_iterable(zip(*[rids] * self.bands))))
            self.pending_matrix[row:row + take] = sigs[:take]
            self.pending_rows.update(zip(rids, range(row, row + take)))
            self.unbloomed.append(keys[:take])
            self.next_kept += take
            self.counts["records"] += take
            self.counts["kept"] += take
            sigs, keys = sigs[take:], keys[take:]
            if row + take >= self.batch_limit:
                self._flush()

    def _add_unbloomed(self) -> None:
        if self.unbloomed:
            self.bloom.add_matrix(np.concatenate(self.unbloomed))
            self.unbloomed.clear()

    def add_reference(self, text: str) -> None:
        """An earlier version's record: compared against, never output. References take negative ids."""
        sig = self.signature(text)
        if sig is None:
            return
        self._index(self.next_reference, sig, self.band_keys(sig))
        self.next_reference -= 1
        self.counts["references"] += 1

    def stats(self) -> dict:
        """Counts for the operation's report: candidate_pairs (records compared because they shared a bucket),
        clusters (kept or reference records that absorbed at least one duplicate), and the parameters."""
        self._flush()
        clusters = self.db.execute("SELECT count(*) FROM clusters").fetchone()[0]
        return {**self.counts, "clusters": clusters, "shingle_words": self.shingle_words, "bands": self.bands,
                "rows": self.rows, "threshold": self.threshold, "seed": self.seed, "minhash": "rensa RMinHash"}

    def close(self) -> None:
        """Closes and deletes the index file (call after stats())."""
        self.db.close()
        Path(self.db_path).unlink(missing_ok=True)

    # ---- the index ----

    def _candidates(self, keys: list[int]) -> list[int]:
        """Records indexed under any of the keys. Only keys the Bloom filter may hold are looked up: most records
        share no bucket with anything, and for them no SQLite query runs at all."""
        first, more = self.pending_first, self.pending_more
        found = {first[k] for k in keys if k in first}  # every key: the unwritten batch's may not be in the filter yet
        for k in keys:
            found.update(more.get(k, ()))
        maybe = [k for k, hit in zip(keys, self.bloom.may_contain(keys)) if hit]  # what is written is in the filter
        if not maybe:
            return sorted(found, key=lambda rid: (rid > 0, abs(rid)))
        rows = self.db.execute(f"SELECT rid FROM buckets WHERE bkey IN ({','.join('?' * len(maybe))})", maybe).fetchall()
        found.update(r[0] for r in rows)
        return sorted(found, key=lambda rid: (rid > 0, abs(rid)))  # references first, then kept records in order

    def _signatures_of(self, rids: list[int]) -> dict[int, np.ndarray]:
        rows = self.pending_rows
        sigs = {rid: self.pending_matrix[rows[rid]] for rid in rids if rid in rows}
        stored = [rid for rid in rids if rid not in sigs]
        if stored:
            found = self.db.execute(f"SELECT rid, sig FROM sigs WHERE rid IN ({','.join('?' * len(stored))})", stored)
            sigs.update((rid, np.frombuffer(blob, dtype=np.uint32)) for rid, blob in found)
        return sigs

    def _best_match(self, sig: np.ndarray, keys: list[int]) -> int | None:
        """The candidate whose signature agrees most (the earliest among equals), if it reaches the threshold."""
        rids = self._candidates(keys)
        if not rids:
            return None
        self.counts["candidate_pairs"] += len(rids)
        sigs = self._signatures_of(rids)
        best, best_agreement = None, self.threshold
        for rid in rids:
            agreement = float(np.count_nonzero(sigs[rid] == sig)) / self.num_perm
            if agreement > best_agreement or (best is None and agreement >= best_agreement):
                best, best_agreement = rid, agreement
        return best

    def _index(self, rid: int, sig: np.ndarray, keys: list[int], bloom: bool = True) -> None:
        if bloom:
            self.bloom.add(keys)
        first = self.pending_first
        for k in keys:
            if k in first:
                self.pending_more.setdefault(k, []).append(rid)
            else:
                first[k] = rid
        row = len(self.pending_rows)
        self.pending_matrix[row] = sig
        self.pending_rows[rid] = row
        if row + 1 >= self.batch_limit:
            self._flush()

    def _flush(self) -> None:
        """Writes the unwritten batch in one transaction (batched inserts: one B-tree pass per table)."""
        self._add_unbloomed()  # what is written is found through the filter only
        if not self.pending_rows and not self.pending_clusters:
            return
        self.db.execute("BEGIN")
        # In key order, so that the B-tree is written page by page rather than at random; sorted as two arrays
        # (no tuple a row held at once).
        more = [(k, rid) for k, rids in self.pending_more.items() for rid in rids]
        keys = np.fromiter([*self.pending_first, *(k for k, _ in more)], dtype=np.int64)
        rids = np.fromiter([*self.pending_first.values(), *(rid for _, rid in more)], dtype=np.int64)
        order = np.lexsort((rids, keys))
        many = "INSERT OR IGNORE INTO buckets VALUES " + ",".join(["(?, ?)"] * ROWS_A_STATEMENT)
        for start in range(0, len(order), FLUSH_ROWS):  # Python ints for a slice at a time, not the whole batch
            rows = order[start:start + FLUSH_ROWS]
            pairs = np.stack([keys[rows], rids[rows]], axis=1)
            whole = len(pairs) // ROWS_A_STATEMENT * ROWS_A_STATEMENT
            self.db.executemany(many, pairs[:whole].reshape(-1, 2 * ROWS_A_STATEMENT).tolist())
            self.db.executemany("INSERT OR IGNORE INTO buckets VALUES (?, ?)", pairs[whole:].tolist())
        matrix = self.pending_matrix
        self.db.executemany("INSERT INTO sigs VALUES (?, ?)",
                            ((rid, matrix[row].tobytes()) for rid, row in self.pending_rows.items()))
        self.db.executemany("INSERT OR IGNORE INTO clusters VALUES (?)", ((rid,) for rid in self.pending_clusters))
        self.db.execute("COMMIT")
        self.pending_first.clear()
        self.pending_more.clear()
        self.pending_rows.clear()
        self.pending_clusters.clear()

