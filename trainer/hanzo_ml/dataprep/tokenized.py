"""Token counts of the split files and their tokenized form, made by the trainer's own code (hanzo_ml.chat), so
the numbers here are the trainer's: the counts are count-tokens' (the whole rendered conversation), and the
tokenized rows are what the trainer's encode_dataset makes of the same file (prompt masking, truncation).

tokenized/<split>.arrow is an Arrow IPC file: one row per record, in file order, with input_ids, labels (-100
where the trainer masks) and document (the record's 0-based index in its split file). Rows are not packed: the
trainer packs (hanzo_ml.packing.pack) when it builds batches, as it does for JSONL.

Speed: a record is tokenized once, and its text encoded once (for a byte-level BPE tokenizer, from a cache of
its pieces: piece_cache.py), the renders made by the compiled template (fast_render.py). labelled_examples makes chat.label_assistant_turns' rows
for a whole chunk in one batch call of the fast tokenizer (Rust), the labels placed by the character spans of the
assistant turns (offset mapping) instead of encoding each prompt again; the filter's token count is the length of the
same ids. The worker that counts a record's tokens (filter or
write_splits) makes its rows too, and TokenizedSplits writes them beside the split lines, so no second pass reads
the split files back (write_tokenized remains for the rare case the split moves a record afterwards).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator, NamedTuple

import numpy as np

from hanzo_ml.dataprep.fast_render import renderer
from hanzo_ml.dataprep.parallel import ordered_map
from hanzo_ml.dataprep.piece_cache import PieceCache
from hanzo_ml.dataprep.split import SPLIT_NAMES
from hanzo_ml.files import sha256_file

CHUNK = 256  # rows per Arrow record batch, in both writers (the batches are part of the file's bytes)


def labelled_examples(tokenizer, conversations: list[list[dict]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(input_ids, labels) as int32 arrays, exactly chat.label_assistant_turns' for each conversation, with one
    encode of each conversation (one batch call for the chunk): each assistant turn's labels run from the token
    where its prompt's render ends to the token where the render up to the turn ends, both found by position in
    the whole render instead of encoding those prefixes again.

    Positions: for a byte-level BPE tokenizer (GPT-2/Llama-3 style: every token stands for a fixed byte string) the
    running sum of the tokens' byte lengths, from the ids alone; for any other tokenizer the character offsets the
    encode returns (a slower encode). Either equals the trainer's separate encodes of the prompt and of the prefix
    whenever both renders are string prefixes of the whole and each boundary falls between two of the whole's
    tokens (BPE never merges across a boundary its whole text keeps, so the prefix alone encodes to the same
    tokens). A conversation where that does not hold (a template that renders prefixes differently, an answer whose
    first characters merge with the header's into one token) takes the trainer's path: its prefixes encoded
    separately, in a second batch call."""
    render = renderer(tokenizer)
    plans: list[tuple[str, list[tuple[str, str]]]] = []
    for messages in conversations:
        whole = render(messages)
        turns = []
        for turn, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            end_text = whole if turn == len(messages) - 1 else render(messages[: turn + 1])
            turns.append((render(messages[:turn], add_generation_prompt=True), end_text))
        plans.append((whole, turns))
    if not plans:
        return []
    lengths = token_byte_lengths(tokenizer)
    wholes = [whole for whole, _ in plans]
    if lengths is not None:
        ids = encode_ids(tokenizer, wholes)
        examples = [labels_by_bytes(whole, turns, input_ids, lengths) for (whole, turns), input_ids in zip(plans, ids)]
    else:
        encoded = offsets_encode_batch(tokenizer, wholes)
        ids = [np.asarray(e.ids, dtype=np.int32) for e in encoded]
        examples = [labels_by_offsets(whole, turns, input_ids, e.offsets)
                    for (whole, turns), input_ids, e in zip(plans, ids, encoded)]
    fallback = [i for i, example in enumerate(examples) if example is None]
    for i, example in zip(fallback, labels_by_prefix_encodes(tokenizer, [plans[i] for i in fallback],
                                                             [ids[i] for i in fallback])):
        examples[i] = example
    return examples  # type: ignore[return-value]


class PackedExamples(NamedTuple):
    """A chunk's (input_ids, labels) or None each, as three arrays (the ids and labels of all, end to end, and each
    one's end; -1 for None): they cross between processes as three buffers, not two arrays per record."""
    ids: np.ndarray
    labels: np.ndarray
    ends: np.ndarray

    @staticmethod
    def pack(examples: list[tuple[np.ndarray, np.ndarray] | None]) -> "PackedExamples":
        made = [e for e in examples if e is not None]
        lengths = np.array([-1 if e is None else len(e[0]) for e in examples], dtype=np.int64)
        ends = np.where(lengths < 0, -1, np.cumsum(np.maximum(lengths, 0)))
        empty = np.zeros(0, np.int32)
        return PackedExamples(np.concatenate([e[0] for e in made]) if made else empty,
                              np.concatenate([e[1] for e in made]) if made else empty, ends)

    def unpack(self) -> list[tuple[np.ndarray, np.ndarray] | None]:
        """Views into the packed arrays, in order."""
        out: list[tuple[np.ndarray, np.ndarray] | None] = []
        start = 0
        for end in self.ends.tolist():
            if end < 0:
                out.append(None)
                continue
            out.append((self.ids[start:end], self.labels[start:end]))
            start = end
        return out


def labels_by_bytes(whole: str, turns: list[tuple[str, str]], input_ids: np.ndarray,
                    lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The labels from the byte spans of the assistant turns, or None where a span is ambiguous."""
    from hanzo_ml.chat import IGNORE_INDEX

    ends = np.cumsum(lengths[input_ids])
    if len(ends) == 0 or int(ends[-1]) != utf8_length(whole):  # the tokens do not spell the text byte for byte
        return None
    labels = np.full(len(input_ids), IGNORE_INDEX, dtype=np.int32)
    for prompt, end_text in turns:
        if not (whole.startswith(prompt) and whole.startswith(end_text)):
            return None
        bounds = [utf8_length(prompt), utf8_length(end_text)]  # at most the whole's: prefixes of it
        found = np.searchsorted(ends, bounds)  # the first token whose end reaches the bound
        if any(bound != 0 and reached != bound for reached, bound in zip(ends[found].tolist(), bounds)):
            return None  # the bound falls inside a token
        start, end = (0 if bound == 0 else at + 1 for at, bound in zip(found.tolist(), bounds))
        labels[start:end] = input_ids[start:end]
    return input_ids, labels


def utf8_length(text: str) -> int:
    """len(text.encode()), without the encode for an ASCII text (Python knows a string is ASCII)."""
    return len(text) if text.isascii() else len(text.encode())


def labels_by_offsets(whole: str, turns: list[tuple[str, str]], input_ids: np.ndarray,
                      offsets: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray] | None:
    """The labels from the character spans of the assistant turns, or None where a span is ambiguous."""
    from hanzo_ml.chat import IGNORE_INDEX

    labels = np.full(len(input_ids), IGNORE_INDEX, dtype=np.int32)
    for prompt, end_text in turns:
        if not (whole.startswith(prompt) and whole.startswith(end_text)):
            return None
        start, end = token_boundary(offsets, len(prompt)), token_boundary(offsets, len(end_text))
        if start is None or end is None or start > end:
            return None
        labels[start:end] = input_ids[start:end]
    return input_ids, labels


def token_boundary(offsets: list[tuple[int, int]], char: int) -> int | None:
    """How many tokens precede character position `char` of the encoded text, when a token boundary lies there
    (the previous token ends at it and the next starts at it); None when `char` falls inside a token."""
    n = len(offsets)
    if char == 0:
        return 0
    low, high = 0, n  # the first token ending after char
    while low < high:
        mid = (low + high) // 2
        if offsets[mid][1] <= char:
            low = mid + 1
        else:
            high = mid
    if low == 0 or offsets[low - 1][1] != char:
        return None
    return low if low == n or offsets[low][0] >= char else None


_BYTE_LENGTHS: dict[int, tuple[object, np.ndarray | None]] = {}


def token_byte_lengths(tokenizer) -> np.ndarray | None:
    """Each token id's length in bytes of the text, when the tokenizer is byte-level BPE without a normalizer
    (each vocabulary token is a string of byte symbols, each added token its content, matched as written); None
    for any other tokenizer (its offsets are used instead). Worked out once per tokenizer."""
    raw = tokenizer._tokenizer
    known = _BYTE_LENGTHS.get(id(raw))
    if known is None or known[0] is not raw:  # kept with its tokenizer, so the id is not reused meanwhile
        known = _BYTE_LENGTHS[id(raw)] = (raw, byte_lengths_of(raw))
    return known[1]


def byte_lengths_of(raw) -> np.ndarray | None:
    import json

    from tokenizers.pre_tokenizers import ByteLevel

    config = json.loads(raw.to_str())
    pre = config.get("pre_tokenizer") or {}
    if config.get("normalizer") is not None or config["model"].get("type") != "BPE" or \
            pre.get("type") != "ByteLevel" or pre.get("add_prefix_space"):
        return None
    added = {token["id"]: token for token in config.get("added_tokens", [])}
    if any(t["lstrip"] or t["rstrip"] or t["single_word"] for t in added.values()):
        return None
    symbols = set(ByteLevel.alphabet())
    vocab = raw.get_vocab(with_added_tokens=True)
    lengths = np.zeros(max(vocab.values()) + 1, dtype=np.int64)
    for token, token_id in vocab.items():
        if token_id in added:
            lengths[token_id] = len(added[token_id]["content"].encode())
        elif all(ch in symbols for ch in token):
            lengths[token_id] = len(token)
        else:
            return None
    return lengths


def labels_by_prefix_encodes(tokenizer, plans: list[tuple[str, list[tuple[str, str]]]],
                             wholes: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """chat.label_assistant_turns' way: every prompt and turn-end render encoded on its own (one batch call)."""
    from hanzo_ml.chat import IGNORE_INDEX
    from hanzo_ml.errors import InputError

    texts = [text for _, turns in plans for turn in turns for text in turn]
    encoded = iter(e.ids for e in fast_encode_batch(tokenizer, texts)) if texts else iter(())
    examples = []
    for (_, turns), input_ids in zip(plans, wholes):
        whole = input_ids.tolist()
        labels = np.full(len(input_ids), IGNORE_INDEX, dtype=np.int32)
        for _ in turns:
            start, end_ids = len(next(encoded)), next(encoded)
            if whole[: len(end_ids)] != end_ids or start > len(end_ids):
                raise InputError("the chat template does not render a conversation's prefixes as token prefixes; "
                                 "prompt masking needs that property")
            labels[start:len(end_ids)] = input_ids[start:len(end_ids)]
        examples.append((input_ids, labels))
    return examples


def offsets_encode_batch(tokenizer, texts: list[str]):
    """The Rust tokenizer's batch encode with character offsets (the same ids as fast_encode_batch)."""
    return tokenizer._tokenizer.encode_batch(texts, add_special_tokens=False)


_PIECE_CACHES: dict[int, tuple[object, PieceCache | None]] = {}


def encode_ids(tokenizer, texts: list[str]) -> list[np.ndarray]:
    """The ids of fast_encode_batch as int32 arrays, from the tokenizer's piece cache (piece_cache.py) where it
    applies; the texts it leaves go to the Rust encode in one batch call."""
    raw = tokenizer._tokenizer
    known = _PIECE_CACHES.get(id(raw))
    if known is None or known[0] is not raw:  # kept with its tokenizer, so the id is not reused meanwhile
        known = _PIECE_CACHES[id(raw)] = (raw, PieceCache.for_tokenizer(raw))
    cache = known[1]
    ids = [cache.encode_array(text) for text in texts] if cache is not None else [None] * len(texts)
    rest = [i for i, found in enumerate(ids) if found is None]
    if rest:
        for i, encoded in zip(rest, fast_encode_batch(tokenizer, [texts[i] for i in rest])):
            ids[i] = np.asarray(encoded.ids, dtype=np.int32)
    return ids  # type: ignore[return-value]


def fast_encode_batch(tokenizer, texts: list[str]):
    """The Rust tokenizer's batch encode; encode_batch_fast (tokenizers >= 0.20) skips the character offsets,
    which nothing here reads (the ids are the same)."""
    raw = tokenizer._tokenizer
    encode = getattr(raw, "encode_batch_fast", raw.encode_batch)
    return encode(texts, add_special_tokens=False)


class TokenizedSplits:
    """tokenized/<split>.arrow written as the split files are: rows arrive with their records, in file order."""

    def __init__(self, directory: Path, max_length: int, tokenizer_sha256: str):
        import pyarrow as pa

        self.max_length = max_length
        self.schema = tokenized_schema(max_length, tokenizer_sha256)
        (directory / "tokenized").mkdir()
        self.paths = {name: directory / "tokenized" / f"{name}.arrow" for name in SPLIT_NAMES}
        self.sinks = {name: pa.OSFile(str(path), "wb") for name, path in self.paths.items()}
        self.writers = {name: pa.ipc.new_file(self.sinks[name], self.schema) for name in SPLIT_NAMES}
        self.pending: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {name: [] for name in SPLIT_NAMES}
        self.rows = dict.fromkeys(SPLIT_NAMES, 0)
        self.tokens = dict.fromkeys(SPLIT_NAMES, 0)

    def add(self, split: str, example: tuple[np.ndarray, np.ndarray]) -> None:
        pending = self.pending[split]
        pending.append((example[0][: self.max_length], example[1][: self.max_length]))
        if len(pending) >= CHUNK:
            self.flush(split)

    def flush(self, split: str) -> None:
        pending = self.pending[split]
        if not pending:
            return
        first = self.rows[split]
        self.writers[split].write_batch(rows_batch([e[0] for e in pending], [e[1] for e in pending], first,
                                                   self.schema))
        self.rows[split] += len(pending)
        self.tokens[split] += sum(len(e[0]) for e in pending)
        pending.clear()

    def finish(self) -> dict[str, dict]:
        """{split: {path, rows, tokens, sha256}}, each file closed."""
        for name in SPLIT_NAMES:
            self.flush(name)
        self.close()
        return {name: {"path": f"tokenized/{path.name}", "rows": self.rows[name], "tokens": self.tokens[name],
                       "sha256": sha256_file(path)} for name, path in self.paths.items()}

    def close(self) -> None:
        for name in SPLIT_NAMES:
            if not self.sinks[name].closed:
                self.writers[name].close()
                self.sinks[name].close()

    def discard(self) -> None:
        self.close()
        for path in self.paths.values():
            path.unlink(missing_ok=True)


def tokenized_schema(max_length: int, tokenizer_sha256: str):
    """The schema metadata says how the rows were made, so a reader can refuse rows made with another tokenizer
    or length."""
    import pyarrow as pa

    metadata = {"tokenizer_sha256": tokenizer_sha256, "max_length": str(max_length), "chat_template": "model",
                "mask_prompt": "true"}
    return pa.schema([("input_ids", pa.list_(pa.int32())), ("labels", pa.list_(pa.int32())),
                      ("document", pa.int64())], metadata=metadata)


def rows_batch(input_ids: list[np.ndarray], labels: list[np.ndarray], first_document: int, schema):
    """One record batch built from flat arrays and offsets (no per-token Python objects)."""
    import pyarrow as pa

    offsets = np.zeros(len(input_ids) + 1, dtype=np.int32)
    np.cumsum([len(ids) for ids in input_ids], out=offsets[1:])
    flat_ids = np.concatenate(input_ids) if input_ids else np.zeros(0, np.int32)
    flat_labels = np.concatenate(labels) if labels else np.zeros(0, np.int32)
    documents = np.arange(first_document, first_document + len(input_ids), dtype=np.int64)
    offsets_array = numeric_array(offsets, pa.int32())
    return pa.record_batch([pa.ListArray.from_arrays(offsets_array, numeric_array(flat_ids, pa.int32())),
                            pa.ListArray.from_arrays(offsets_array, numeric_array(flat_labels, pa.int32())),
                            numeric_array(documents, pa.int64())], schema=schema)


def numeric_array(values: np.ndarray, type_):
    """An Arrow array over a numpy array's buffer. pa.array(ndarray) would first look whether the value is a pandas
    object, which imports pandas: about 0.3 s of CPU and 60 MB of resident memory in the main process, for nothing."""
    import pyarrow as pa

    values = np.ascontiguousarray(values, dtype=type_.to_pandas_dtype())
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def line_chunks(path: Path, name: str) -> Iterator[list[tuple[str, str]]]:
    chunk: list[tuple[str, str]] = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            chunk.append((line, f"{name}:{number}"))
            if len(chunk) >= CHUNK:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def counting_worker(load_tokenizer):
    """Counts each canonical line's tokens as count-tokens does: chat.parse_record, then the whole rendered
    conversation (a preference pair: its prompt and chosen answer)."""
    def count(lines: list[str | None]) -> list[int | None]:
        """None in, None out: a record whose count a stage already made is not counted twice."""
        from hanzo_ml.chat import parse_record
        from hanzo_ml.dataprep.ops.filter import conversation_lengths

        todo = [parse_record(line, "record") for line in lines if line is not None]
        counted = iter(conversation_lengths(load_tokenizer(), todo))
        return [None if line is None else next(counted) for line in lines]
    return count


def labelling_worker(load_tokenizer):
    """labelled_examples for a chunk of conversations, packed; None in, None out (a stage already made that
    record's)."""
    def label(conversations: list[list[dict] | None]) -> PackedExamples:
        made = iter(labelled_examples(load_tokenizer(), [c for c in conversations if c is not None]))
        return PackedExamples.pack([None if c is None else next(made) for c in conversations])
    return label


def tokenizing_worker(load_tokenizer, max_length: int):
    def encode(chunk: list[tuple[str, str]]) -> tuple[list[np.ndarray], list[np.ndarray], int]:
        """input_ids and labels cut to max_length, and the tokens before the cut (count-tokens' count)."""
        from hanzo_ml.chat import parse_record

        full = labelled_examples(load_tokenizer(), [parse_record(line, where) for line, where in chunk])
        return [ids[:max_length] for ids, _ in full], [labels[:max_length] for _, labels in full], \
            sum(len(ids) for ids, _ in full)
    return encode


def write_tokenized(source: Path, target: Path, load_tokenizer, max_length: int, threads: int,
                    tokenizer_sha256: str) -> dict:
    """tokenized/<split>.arrow from <split>.jsonl: ({path, rows, tokens, sha256}, the split's count-tokens count).
    The schema metadata says how the rows were made, so a reader can refuse rows made with another tokenizer or
    length."""
    import pyarrow as pa

    schema = tokenized_schema(max_length, tokenizer_sha256)
    rows = tokens = untruncated = 0
    with pa.OSFile(str(target), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        for _, (input_ids, labels, before_cut) in ordered_map(lambda: tokenizing_worker(load_tokenizer, max_length),
                                                  line_chunks(source, source.name), threads):
            writer.write_batch(rows_batch(input_ids, labels, rows, schema))
            rows += len(input_ids)
            tokens += sum(len(ids) for ids in input_ids)
            untruncated += before_cut
    info = {"path": f"tokenized/{target.name}", "rows": rows, "tokens": tokens, "sha256": sha256_file(target)}
    return info, untruncated


# ---- the trainer reading them back (data.tokenized_dir) -------------------------------------------

def read_tokenized(directory: Path, split: str, jsonl_path: Path, expected: dict[str, str], where: str) -> list:
    """The TokenizedExamples of tokenized/<split>.arrow, after checking it was made the way this job would
    tokenize (`expected`: tokenizer_sha256, max_length, chat_template, mask_prompt) and from this split file
    (one row per record). Torch-free; the rows stay in file order."""
    import pyarrow as pa

    from hanzo_ml.chat import TokenizedExample
    from hanzo_ml.errors import InputError

    path = Path(directory) / f"{split}.arrow"
    try:
        table = pa.ipc.open_file(path).read_all()
    except (OSError, pa.ArrowInvalid) as e:
        raise InputError(f"{where}: cannot read {path} as Arrow: {e}") from e
    made = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    for key, value in expected.items():
        if made.get(key) != value:
            raise InputError(f"{where}: {path.name} was made with {key} {made.get(key)!r}, this job uses "
                             f"{value!r}; prepare the version again with the job's settings")
    with open(jsonl_path, "rb") as f:
        records = sum(1 for line in f if line.strip())
    if records != table.num_rows:
        raise InputError(f"{where}: {path.name} has {table.num_rows} rows but {jsonl_path} has {records} records "
                         "(not the same version)")
    return [TokenizedExample(input_ids, labels) for input_ids, labels in
            zip(table.column("input_ids").to_pylist(), table.column("labels").to_pylist())]
