"""Token ids of ASCII texts from a cache of pre-token pieces, for byte-level BPE tokenizers: the same ids as the
Rust tokenizer's encode (add_special_tokens=False), at a fraction of its cost on chat text.

A byte-level BPE tokenizer (GPT-2/Llama-3 style) encodes a text in three steps: it cuts out the added tokens
(<|user|>, <|end|>, ...), splits the rest into pieces with the GPT-2 regular expression, and runs BPE on each
piece alone (merges never cross a piece's edge). So a piece's ids depend on the piece only, and chat text repeats
its pieces (words with their leading space) over and over: the ids of a piece are looked up in a dict, and only a
piece never seen runs through the tokenizer's own pre-tokenizer and BPE model. On the data bench's records the Rust
encode spent about 230 us a record (most of it in its pre-tokenizer's regular expression), the cache about 60 us
with a list of ids a piece, and about 30 us now that a piece's ids are kept as the bytes of an int32 array and a
text's ids are one bytes join (no Python int a token, no list to make an array of).

The regular expression is the GPT-2 one, with its classes written out for ASCII (\\p{L}: A-Z a-z, \\p{N}: 0-9,
\\s: tab, line feed, vertical tab, form feed, carriage return and space, as Unicode's White_Space has them), so it
is used for ASCII texts only: any other text (None from `encode`) is left to the Rust encode. A piece the
tokenizer's own pre-tokenizer would split further, which the expression rules out, also sends its text there.
`for_tokenizer` says None for any tokenizer outside this shape (another pre-tokenizer or model, a normalizer, BPE
dropout, added tokens matched with lstrip/rstrip/single_word or after normalization).
"""
from __future__ import annotations

import json
import re

import numpy as np

# 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ (tokenizers' ByteLevel) on ASCII
PIECES = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+", re.ASCII)
MAX_PIECES = 200_000  # cached pieces a process keeps (about 30 MB); the cache starts over when full


class Unsplit(Exception):
    """A piece the tokenizer's own pre-tokenizer would cut further."""


class Pieces(dict):
    """piece -> its ids as the bytes of an int32 array (a text's ids are then one bytes join, with no Python int a
    token); a piece not yet seen is encoded on lookup."""

    def __init__(self, raw):
        super().__init__()
        self.raw = raw

    def __missing__(self, piece: str) -> list[int]:
        split = self.raw.pre_tokenizer.pre_tokenize_str(piece)  # the piece's bytes as the BPE model's symbols
        if len(split) != 1:
            raise Unsplit(piece)
        if len(self) >= MAX_PIECES:
            self.clear()
        ids = self[piece] = np.array([token.id for token in self.raw.model.tokenize(split[0][0])],
                                     dtype=np.int32).tobytes()
        return ids


class PieceCache:
    def __init__(self, raw, added: dict[str, int]):
        self.raw = raw
        self.added = {token: np.array([token_id], dtype=np.int32).tobytes() for token, token_id in added.items()}
        longest_first = sorted(added, key=len, reverse=True)  # leftmost-longest, as the tokenizer matches them
        self.added_pattern = re.compile("(" + "|".join(map(re.escape, longest_first)) + ")") if added else None
        self.pieces = Pieces(raw)

    @staticmethod
    def for_tokenizer(raw) -> "PieceCache | None":
        """A cache for this Rust tokenizer (tokenizers.Tokenizer), or None when it is not plain byte-level BPE."""
        config = json.loads(raw.to_str())
        pre = config.get("pre_tokenizer") or {}
        model = config.get("model") or {}
        if config.get("normalizer") is not None or model.get("type") != "BPE" or model.get("dropout") or \
                pre.get("type") != "ByteLevel" or pre.get("add_prefix_space") or not pre.get("use_regex", True):
            return None
        tokens = config.get("added_tokens", [])
        if any(t["lstrip"] or t["rstrip"] or t["single_word"] or (t["normalized"] and not t["special"])
               for t in tokens):
            return None
        return PieceCache(raw, {t["content"]: t["id"] for t in tokens})

    def encode(self, text: str) -> list[int] | None:
        """The ids of an ASCII text; None for any other text (or a piece the expression cut otherwise)."""
        ids = self.encode_array(text)
        return None if ids is None else ids.tolist()

    def encode_array(self, text: str) -> np.ndarray | None:
        """encode's ids as a (read-only) int32 array, joined from the pieces' bytes."""
        if not text.isascii():
            return None
        lookup = self.pieces.__getitem__
        if self.added_pattern is None:
            parts = [text]
        else:
            parts = self.added_pattern.split(text)
        ids: list[bytes] = []
        try:
            for i, part in enumerate(parts):
                if i % 2:  # the split keeps the added tokens at the odd places
                    ids.append(self.added[part])
                elif part:
                    ids.extend(map(lookup, PIECES.findall(part)))
        except Unsplit:
            return None
        return np.frombuffer(b"".join(ids), dtype=np.int32)
