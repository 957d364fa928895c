"""Token counts of the split files and their tokenized form, made by the trainer's own code (hanzo_ml.chat), so
the numbers here are the trainer's: the counts are count-tokens' (the whole rendered conversation), and the
tokenized rows are what the trainer's encode_dataset makes of the same file (prompt masking, truncation).

tokenized/<split>.arrow is an Arrow IPC file: one row per record, in file order, with input_ids, labels (-100
where the trainer masks) and document (the record's 0-based index in its split file). Rows are not packed: the
trainer packs (hanzo_ml.packing.pack) when it builds batches, as it does for JSONL.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from hanzo_ml.dataprep.parallel import ordered_map
from hanzo_ml.files import sha256_file

CHUNK = 256


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


def tokenizing_worker(load_tokenizer, max_length: int):
    def encode(chunk: list[tuple[str, str]]) -> tuple[list[list[int]], list[list[int]], int]:
        """input_ids and labels cut to max_length, and the tokens before the cut (count-tokens' count)."""
        from hanzo_ml.chat import label_assistant_turns, parse_record

        tokenizer = load_tokenizer()
        full = [label_assistant_turns(tokenizer, parse_record(line, where)) for line, where in chunk]
        examples = [e.truncated(max_length) for e in full]
        return [e.input_ids for e in examples], [e.labels for e in examples], sum(len(e.input_ids) for e in full)
    return encode


def write_tokenized(source: Path, target: Path, load_tokenizer, max_length: int, threads: int,
                    tokenizer_sha256: str) -> dict:
    """tokenized/<split>.arrow from <split>.jsonl: ({path, rows, tokens, sha256}, the split's count-tokens count).
    The schema metadata says how the rows were made, so a reader can refuse rows made with another tokenizer or
    length."""
    import pyarrow as pa

    metadata = {"tokenizer_sha256": tokenizer_sha256, "max_length": str(max_length), "chat_template": "model",
                "mask_prompt": "true"}
    schema = pa.schema([("input_ids", pa.list_(pa.int32())), ("labels", pa.list_(pa.int32())),
                        ("document", pa.int64())], metadata=metadata)
    rows = tokens = untruncated = 0
    with pa.OSFile(str(target), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        for _, (input_ids, labels, before_cut) in ordered_map(lambda: tokenizing_worker(load_tokenizer, max_length),
                                                  line_chunks(source, source.name), threads):
            documents = list(range(rows, rows + len(input_ids)))
            writer.write_batch(pa.record_batch([pa.array(input_ids, pa.list_(pa.int32())),
                                                pa.array(labels, pa.list_(pa.int32())),
                                                pa.array(documents, pa.int64())], schema=schema))
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
