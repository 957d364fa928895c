"""A record on its way through preparation, and the canonical bytes every version file is made of.

canonical_json writes exactly what datasets/ingest/records.ts `canonicalJson` writes (JSON.stringify of the same
keys in the same order), so a version prepared here and one uploaded through the API agree byte for byte.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

# Python keeps a lone UTF-16 surrogate (from a "\ud800" escape) as a character; JSON.stringify escapes it.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass
class Record:
    value: dict[str, Any]          # {"messages": [...]} or {"prompt": [...], "chosen": [...], "rejected": [...]}
    file: str                      # the source's display name (and member file) for errors
    line: int                      # 1-based line (text formats) or row (columnar formats)
    source: str                    # the display_name of the spec source it came from (split_of keys)
    split: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # top-level fields outside the record form
    tokens: int | None = None  # the rendered conversation's tokens, once a stage has counted them
    # (input_ids, labels) of tokenized.labelled_examples, made with the count when a tokenize operation follows
    encoded: tuple | None = field(default=None, repr=False, compare=False)
    _line: str | None = field(default=None, repr=False, compare=False)

    @property
    def line_json(self) -> str:
        """The canonical line, computed once (every stage that changes `value` calls changed())."""
        if self._line is None:
            self._line = canonical_json(self.value)
        return self._line

    def changed(self) -> None:
        self._line = None
        self.tokens = None
        self.encoded = None

    @property
    def is_preference(self) -> bool:
        return "prompt" in self.value

    def conversation(self) -> list[dict[str, str]]:
        return conversation_of(self.value)

    def text(self) -> str:
        return text_of(self.value)

    def to_spool(self) -> str:
        return json.dumps([self.file, self.line, self.source, self.split, self.extra, self.value, self.tokens],
                          ensure_ascii=False, separators=(",", ":"))

    @staticmethod
    def from_spool(line: str) -> "Record":
        file, number, source, split, extra, value, tokens = json.loads(line)
        return Record(value, file, number, source, split, extra, tokens)


def conversation_of(value: dict[str, Any]) -> list[dict[str, str]]:
    """What training sees: the messages, or a preference pair's prompt followed by its chosen answer."""
    if "prompt" in value:
        return value["prompt"] + value["chosen"]
    return value["messages"]


def text_of(value: dict[str, Any]) -> str:
    """Every message's content, one per line: what language detection and near-duplicate search read."""
    messages = value["prompt"] + value["chosen"] + value["rejected"] if "prompt" in value else value["messages"]
    return "\n".join(m["content"] for m in messages)


def clean(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def canonical_json(value: dict[str, Any]) -> str:
    """Keys in a fixed order, no spaces, non-ASCII kept: JSON.stringify's output for the same record."""
    if "prompt" in value:
        ordered = {"prompt": clean(value["prompt"]), "chosen": clean(value["chosen"]),
                   "rejected": clean(value["rejected"])}
    else:
        ordered = {"messages": clean(value["messages"])}
    try:  # orjson writes the same bytes as the json module here, about five times faster
        return orjson.dumps(ordered).decode()
    except TypeError:  # a lone surrogate (orjson refuses it): the json module's text, escaped as JSON.stringify does
        pass
    text = json.dumps(ordered, ensure_ascii=False, separators=(",", ":"))
    if _LONE_SURROGATE.search(text):
        text = _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text
