"""prepare-dataset sources: every format reads to the same normalized records, and bad input is named by file,
record and field (the upload's words, checked against datasets/ingest/records.ts itself)."""
from __future__ import annotations

import csv
import gzip
import json
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
import zstandard

from hanzo_ml.dataprep.issues import IssueLog
from hanzo_ml.dataprep.normalize import normalize_chat, normalize_instruction, normalize_preference
from hanzo_ml.dataprep.records import canonical_json
from hanzo_ml.dataprep.sources import SourceReader
from helpers import REPO_DIR

INSTRUCTIONS = [
    {"instruction": "Reset my password", "input": "", "response": "Use the link on the sign-in page."},
    {"instruction": "Translate", "input": "bonjour", "response": "hello", "system": "You translate."},
    {"instruction": "Ünïcode ✓ and \"quotes\"", "input": "line one\nline two", "response": "ok, 🎉"},
]
EXPECTED = [
    {"messages": [{"role": "user", "content": "Reset my password"},
                  {"role": "assistant", "content": "Use the link on the sign-in page."}]},
    {"messages": [{"role": "system", "content": "You translate."}, {"role": "user", "content": "Translate\n\nbonjour"},
                  {"role": "assistant", "content": "hello"}]},
    {"messages": [{"role": "user", "content": "Ünïcode ✓ and \"quotes\"\n\nline one\nline two"},
                  {"role": "assistant", "content": "ok, 🎉"}]},
]
CHATS = [r for r in EXPECTED]


def source(path: Path, **options) -> SimpleNamespace:
    fields = {"format": "auto", "display_name": Path(path).name, "text_unit": "line", "text_field": "text"}
    fields.update(options)
    return SimpleNamespace(path=str(path), **fields)


def read(tmp_path: Path, *sources, max_errors: int = 20):
    log = IssueLog(max_errors)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    reader = SourceReader(list(sources), log, work)
    records = list(reader)
    return records, log.issues, reader


def values(records) -> list[dict]:
    return [r.value for r in records]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def gz(path: Path) -> Path:
    out = path.with_name(path.name + ".gz")
    out.write_bytes(gzip.compress(path.read_bytes()))
    return out


def zst(path: Path) -> Path:
    out = path.with_name(path.name + ".zst")
    out.write_bytes(zstandard.ZstdCompressor().compress(path.read_bytes()))
    return out


def chat_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows)


def write_hf_dataset(directory: Path, table: pa.Table, shards: int = 2) -> Path:
    """What datasets' save_to_disk writes: Arrow stream shards, state.json listing them, dataset_info.json."""
    directory.mkdir()
    per = -(-table.num_rows // shards)
    names = []
    for i in range(shards):
        name = f"data-{i:05d}-of-{shards:05d}.arrow"
        with pa.OSFile(str(directory / name), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table.slice(i * per, per))
        names.append({"filename": name})
    (directory / "state.json").write_text(json.dumps({"_data_files": names, "_split": None}))
    (directory / "dataset_info.json").write_text(json.dumps({"features": {}}))
    return directory


# ---- every format, the same records ---------------------------------------------------------------

@pytest.mark.parametrize("variant", ["jsonl", "jsonl.gz", "jsonl.zst", "parquet", "parquet.zst", "arrow-file",
                                     "arrow-stream", "feather", "arrow.gz", "hf-datasets", "csv", "csv.gz"])
def test_every_format_reads_to_the_same_normalized_records(tmp_path, variant):
    table = chat_table(CHATS)
    if variant.startswith("jsonl"):
        path = write_jsonl(tmp_path / "data.jsonl", INSTRUCTIONS)
    elif variant.startswith("parquet"):
        path = tmp_path / "data.parquet"
        pq.write_table(table, path, row_group_size=2)
    elif variant in ("arrow-file", "arrow.gz"):
        path = tmp_path / "data.arrow"
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=2)
    elif variant == "arrow-stream":
        path = tmp_path / "data.arrow"
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    elif variant == "feather":
        path = tmp_path / "data.feather"
        feather.write_feather(table, path)
    elif variant == "hf-datasets":
        path = write_hf_dataset(tmp_path / "saved", table)
    else:
        path = tmp_path / "data.csv"
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, ["instruction", "input", "response", "system"])
            writer.writeheader()
            writer.writerows({"system": "", **r} for r in INSTRUCTIONS)
    if variant.endswith(".gz"):
        path = gz(path)
    elif variant.endswith(".zst"):
        path = zst(path)

    records, issues, reader = read(tmp_path, source(path))

    assert issues == []
    assert values(records) == EXPECTED
    if variant == "hf-datasets":  # rows are numbered per shard, and the shard is named
        assert [(r.file, r.line) for r in records] == [("saved/data-00000-of-00002.arrow", 1),
                                                       ("saved/data-00000-of-00002.arrow", 2),
                                                       ("saved/data-00001-of-00002.arrow", 1)]
    else:
        assert [r.line for r in records] == ([2, 3, 4] if variant.startswith("csv") else [1, 2, 3])


def test_a_directory_is_read_file_by_file_in_name_order_and_records_keep_their_file(tmp_path):
    folder = tmp_path / "parts"
    folder.mkdir()
    write_jsonl(folder / "b.jsonl", INSTRUCTIONS[1:])
    pq.write_table(chat_table(CHATS[:1]), folder / "a.parquet")

    records, issues, _ = read(tmp_path, source(folder, display_name="upload"))

    assert issues == []
    assert values(records) == EXPECTED
    assert [(r.file, r.line) for r in records] == [("upload/a.parquet", 1), ("upload/b.jsonl", 1),
                                                    ("upload/b.jsonl", 2)]


def test_csv_line_breaks_inside_quotes_are_newlines_whatever_the_file_used(tmp_path):
    path = tmp_path / "windows.csv"
    path.write_bytes(b'\xef\xbb\xbfInstruction,Output\r\n"two\r\nlines",ok\r\n\r\n"say ""hi""",5" screen\r\n')

    records, issues, _ = read(tmp_path, source(path))

    assert issues == []
    assert values(records) == [
        {"messages": [{"role": "user", "content": "two\nlines"}, {"role": "assistant", "content": "ok"}]},
        {"messages": [{"role": "user", "content": 'say "hi"'}, {"role": "assistant", "content": '5" screen'}]}]
    assert [r.line for r in records] == [2, 5]


def test_a_saved_dataset_dict_is_read_split_by_split_in_its_listed_order(tmp_path):
    root = tmp_path / "dict"
    root.mkdir()
    write_hf_dataset(root / "train", chat_table(CHATS[:2]), shards=1)
    write_hf_dataset(root / "test", chat_table(CHATS[2:]), shards=1)
    (root / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}))

    records, issues, _ = read(tmp_path, source(root, display_name="hub"))

    assert issues == []
    assert values(records) == EXPECTED
    assert [r.file for r in records] == ["hub/train/data-00000-of-00001.arrow"] * 2 + \
        ["hub/test/data-00000-of-00001.arrow"]


def test_a_shard_missing_from_a_saved_dataset_is_named(tmp_path):
    saved = write_hf_dataset(tmp_path / "saved", chat_table(CHATS), shards=2)
    (saved / "data-00001-of-00002.arrow").unlink()

    records, issues, _ = read_or_issue(tmp_path, source(saved))

    assert records == []
    assert issues[0]["file"] == "saved" and "data-00001-of-00002.arrow" in issues[0]["message"]


def read_or_issue(tmp_path: Path, src):
    from hanzo_ml.dataprep.issues import PrepareInputError

    try:
        records, issues, _ = read(tmp_path, src)
        return records, issues, None
    except PrepareInputError as e:
        return [], e.issues, None


def test_text_becomes_one_assistant_turn_per_line_or_per_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("first note\n\n  \nsecond note\r\n", encoding="utf-8")

    by_line, issues, reader = read(tmp_path, source(path))
    by_file, _, _ = read(tmp_path, source(path, text_unit="file"))

    assert issues == []
    assert values(by_line) == [{"messages": [{"role": "assistant", "content": "first note"}]},
                               {"messages": [{"role": "assistant", "content": "second note"}]}]
    assert [r.line for r in by_line] == [1, 4]
    assert values(by_file) == [{"messages": [{"role": "assistant", "content": "first note\n\n  \nsecond note\r\n"}]}]
    assert reader.summary.form == "text"


def test_a_columnar_text_field_is_plain_text(tmp_path):
    path = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"body": ["alpha", "beta"], "lang": ["en", "de"]}), path)

    records, issues, _ = read(tmp_path, source(path, text_field="body"))

    assert issues == []
    assert values(records) == [{"messages": [{"role": "assistant", "content": "alpha"}]},
                               {"messages": [{"role": "assistant", "content": "beta"}]}]
    assert records[1].extra == {"lang": "de"}


# ---- bad input, per format ----------------------------------------------------------------------------

def test_a_bad_json_line_is_named_and_reading_goes_on(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(INSTRUCTIONS[0]) + "\n{not json\n[1]\n" + json.dumps({"messages": []}) + "\n")

    _, issues, _ = read(tmp_path, source(path, display_name="upload.jsonl"))

    assert [(i["file"], i["record"], i["field"]) for i in issues] == [
        ("upload.jsonl", 2, None), ("upload.jsonl", 3, None), ("upload.jsonl", 4, None)]
    assert issues[0]["message"].startswith("invalid JSON")
    assert issues[1]["message"] == "expected a JSON object, got array"
    assert "mixed forms" in issues[2]["message"]


def test_a_parquet_row_missing_messages_names_its_row_and_field(tmp_path):
    path = tmp_path / "chat.parquet"
    rows = [CHATS[0], {"messages": None}, CHATS[1]]
    pq.write_table(pa.Table.from_pylist(rows), path)

    _, issues, _ = read(tmp_path, source(path))

    assert issues == [{"file": "chat.parquet", "record": 2, "field": None,
                       "message": 'expected a "messages" array (chat form), "instruction" and "response" fields '
                                  '(instruction form) or "prompt", "chosen" and "rejected" (preference form), '
                                  'or a "text" column of plain text'}]


def test_a_wrong_type_in_an_arrow_column_is_named(tmp_path):
    path = tmp_path / "pairs.arrow"
    table = pa.table({"instruction": ["a", "b"], "response": [1, 2]})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)

    _, issues, _ = read(tmp_path, source(path))

    assert issues[0] == {"file": "pairs.arrow", "record": 1, "field": "response",
                         "message": "expected string, got number"}


def test_an_empty_text_is_refused(tmp_path):
    blank = tmp_path / "blank.txt"
    blank.write_text("  \n\n")
    empty_cell = tmp_path / "cells.csv"
    empty_cell.write_text("text\nhello\n\" \"\n")

    _, by_file, _ = read(tmp_path, source(blank, text_unit="file"))
    _, by_line, _ = read(tmp_path, source(blank))
    _, in_csv, _ = read(tmp_path, source(empty_cell))

    assert by_file[0]["file"] == "blank.txt" and "non-empty text" in by_file[0]["message"]
    assert by_line == [{"file": "blank.txt", "record": None, "field": None, "message": "file has no records"}]
    assert in_csv == [{"file": "cells.csv", "record": 3, "field": "text", "message": "expected non-empty text"}]


def test_a_truncated_gzip_is_named(tmp_path):
    full = gz(write_jsonl(tmp_path / "data.jsonl", INSTRUCTIONS * 50))
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(full.read_bytes()[: full.stat().st_size // 2])

    _, issues, _ = read(tmp_path, source(cut))

    assert len(issues) == 1
    assert issues[0]["file"] == "cut.jsonl.gz"
    assert "truncated" in issues[0]["message"]


def test_a_zst_that_is_not_zstd_is_named(tmp_path):
    fake = tmp_path / "data.jsonl.zst"
    shutil.copy(write_jsonl(tmp_path / "data.jsonl", INSTRUCTIONS), fake)

    _, issues, _ = read(tmp_path, source(fake))

    assert len(issues) == 1 and issues[0]["file"] == "data.jsonl.zst"
    assert issues[0]["message"].startswith("cannot decompress data.jsonl.zst")


def test_a_csv_without_the_required_columns_is_named(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("question,answer\nq,a\n")

    _, issues, _ = read(tmp_path, source(path))

    assert [i["message"] for i in issues] == ['missing required column "instruction"',
                                              'missing required column "response" (or its alias "output")']
    assert all(i["record"] == 1 for i in issues)


def test_a_file_that_is_not_parquet_is_named(tmp_path):
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"PAR1 this is not parquet")

    _, issues, _ = read(tmp_path, source(path))

    assert issues[0]["file"] == "broken.parquet" and "Parquet" in issues[0]["message"]


def test_reading_stops_at_max_errors(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("x\n" * 100)

    _, issues, _ = read(tmp_path, source(path), max_errors=5)

    assert [i["record"] for i in issues] == [1, 2, 3, 4, 5]


# ---- the same rules and words as the upload (datasets/ingest/records.ts) ----------------------------------

CASES = {
    "messages": [
        {"messages": [{"role": "bot", "content": "x"}]},
        {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": " "}]},
        {"messages": []}, {"messages": "hi"}, {},
        {"messages": [{"role": "user"}]},
        {"messages": [{"content": "a"}, {"role": "assistant", "content": 5}]},
        {"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]},
        {"messages": [{"role": "user", "content": "s"}, {"role": "user", "content": "a"}]},
        {"messages": [{"role": "assistant", "content": "a"}, 3]},
        {"messages": [{"role": "user", "content": "q", "extra": 1}, {"role": "assistant", "content": "a"}], "id": 3},
    ],
    "instruction": [
        {"instruction": "", "response": "x"}, {"instruction": "i"},
        {"instruction": "i", "response": "r", "output": "o"}, {"instruction": 5, "output": "o"}, {"response": "r"},
        {"instruction": "i", "input": None, "system": 3, "response": "r"}, {"instruction": "i", "output": " "},
        {"instruction": "i", "input": " ", "system": "", "output": "o"},
    ],
    "preference": [
        {"prompt": [{"role": "user", "content": "q"}], "chosen": "a", "rejected": "a"},
        {"prompt": [{"role": "assistant", "content": "q"}], "chosen": "a", "rejected": "b"},
        {"prompt": [], "chosen": "a"}, {"chosen": "a", "rejected": [{"role": "user", "content": "b"}]},
        {"prompt": [{"role": "user", "content": "q"}], "chosen": 5, "rejected": []},
        {"prompt": [{"role": "user", "content": "q"}], "chosen": " ", "rejected": "b"},
        {"prompt": [{"role": "user", "content": "q"}], "chosen": [{"role": "user", "content": "x"}], "rejected": "b"},
        {"prompt": [{"role": "user", "content": "q"}], "chosen": "a\u2028\u0001", "rejected": [
            {"role": "assistant", "content": "b"}]},
    ],
}
TS_NORMALIZE = """
import { normalizeChatRecord, normalizeInstructionRecord, normalizePreferenceRecord, canonicalJson }
  from './datasets/ingest/records.ts';
import { readFileSync } from 'node:fs';
const cases = JSON.parse(readFileSync(process.argv[1], 'utf8'));
const fns = { messages: normalizeChatRecord, instruction: normalizeInstructionRecord,
              preference: normalizePreferenceRecord };
const out = {};
for (const [form, list] of Object.entries(cases)) out[form] = list.map((c) => {
  const r = fns[form](c);
  return r.ok ? { line: canonicalJson(r.record) } : { problems: r.problems.map((p) => [p.field, p.message]) };
});
console.log(JSON.stringify(out));
"""


def test_normalization_matches_the_upload_path_problem_for_problem(tmp_path):
    npx = shutil.which("npx")
    if npx is None or not (REPO_DIR / "node_modules").exists():
        pytest.skip("the TypeScript side (npx, node_modules) is not installed here")
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps(CASES))
    done = subprocess.run([npx, "tsx", "-e", TS_NORMALIZE, str(cases)], cwd=REPO_DIR, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    expected = json.loads(done.stdout)
    python = {"messages": normalize_chat, "instruction": normalize_instruction, "preference": normalize_preference}

    for form, items in CASES.items():
        for case, want in zip(items, expected[form]):
            record, problems = python[form](case)
            got = {"line": canonical_json(record)} if record else {"problems": [list(p) for p in problems]}
            assert got == want, case


def test_canonical_lines_are_json_stringify_for_every_character_and_a_lone_surrogate():
    import json

    # JSON.stringify's output: escapes for quote, backslash and the C0 controls (short forms where JSON has them,
    # lowercase \u00xx otherwise), every other character as itself, a lone surrogate as a lowercase \u escape
    def stringify(text: str) -> str:
        short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
        return '"' + "".join(short.get(c) or (f"\\u{ord(c):04x}" if ord(c) < 0x20 or 0xD800 <= ord(c) <= 0xDFFF
                                               else c) for c in text) + '"'

    texts = ["".join(chr(c) for c in range(start, min(start + 512, 0x10000)) if not 0xD800 <= c <= 0xDFFF)
             for start in range(0, 0x10000, 512)] + ["emoji \U0001F600 and \u2028", "lone \ud800 surrogate"]
    for text in texts:
        value = {"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "ok"}]}
        line = canonical_json(value)
        assert line == '{"messages":[{"role":"user","content":' + stringify(text) + \
            '},{"role":"assistant","content":"ok"}]}'
        assert json.loads(line) == value
