"""Preference pairs for DPO and ORPO: reading, validating and tokenizing `prompt` / `chosen` / `rejected` records.

Torch-free, like chat.py. A record is one JSON object per line:

    {"prompt": [{"role": "user", "content": "..."}],           # the conversation so far (system/user/assistant),
     "chosen": [{"role": "assistant", "content": "..."}],      # ... the better answer,
     "rejected": [{"role": "assistant", "content": "..."}]}    # ... and the worse one

`chosen` and `rejected` may also be plain strings (one assistant message). Every record is checked before any
model is loaded; the first bad one raises InputError naming file, line and field.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from hanzo_ml.chat import IGNORE_INDEX, Messages, check_message, encode_text, render
from hanzo_ml.errors import InputError
from hanzo_ml.files import read_jsonl_records

PREFERENCE_FIELDS = ("prompt", "chosen", "rejected")


@dataclass(frozen=True)
class PreferencePair:
    prompt: Messages
    chosen: Messages    # assistant message(s) that follow the prompt
    rejected: Messages


@dataclass(frozen=True)
class PreferenceExample:
    """Token ids of one pair: the prompt (chat template up to the assistant header) and each completion."""
    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]

    @property
    def num_tokens(self) -> int:
        return 2 * len(self.prompt_ids) + len(self.chosen_ids) + len(self.rejected_ids)


# ---- reading -----------------------------------------------------------------------------------

def read_preference_jsonl(path: Path, allow_empty: bool = False) -> list[PreferencePair]:
    return read_jsonl_records(path, parse_preference_record, allow_empty)


def parse_preference_record(line: str, where: str) -> PreferencePair:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise InputError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from e
    if not isinstance(record, dict):
        raise InputError(f'{where}: expected an object {{"prompt": [...], "chosen": [...], "rejected": [...]}}')
    if "messages" in record and "chosen" not in record:
        raise InputError(f"{where}: chosen: is required (this method trains on preference pairs, the record is a "
                         "chat record)")
    for name in PREFERENCE_FIELDS:
        if name not in record:
            raise InputError(f"{where}: {name}: is required")
    prompt = messages_field(record["prompt"], f"{where}: prompt")
    if prompt[-1]["role"] == "assistant":
        raise InputError(f"{where}: prompt[{len(prompt) - 1}].role: the prompt must end before the answer, "
                         "got 'assistant'")
    chosen = completion_field(record["chosen"], f"{where}: chosen")
    rejected = completion_field(record["rejected"], f"{where}: rejected")
    if chosen == rejected:
        raise InputError(f"{where}: rejected: identical to chosen (a pair needs two different answers)")
    return PreferencePair(prompt=prompt, chosen=chosen, rejected=rejected)


def messages_field(value: object, where: str) -> Messages:
    if not isinstance(value, list) or not value:
        raise InputError(f"{where}: expected a non-empty list of messages")
    for i, message in enumerate(value):
        check_message(message, f"{where}[{i}]")
    return [{"role": m["role"], "content": m["content"]} for m in value]


def completion_field(value: object, where: str) -> Messages:
    """An answer: a string, or a list of assistant messages."""
    if isinstance(value, str):
        value = [{"role": "assistant", "content": value}]
    messages = messages_field(value, where)
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            raise InputError(f"{where}[{i}].role: expected 'assistant', got '{message['role']}'")
    if not any(m["content"].strip() for m in messages):
        raise InputError(f"{where}: the answer is empty")
    return messages


# ---- tokenizing --------------------------------------------------------------------------------

def encode_pair(tokenizer, pair: PreferencePair, max_seq_length: int) -> PreferenceExample:
    """prompt_ids: the rendered prompt with the assistant header; each completion: the tokens the whole
    conversation adds after it (answer and closing tokens). Over-long pairs keep the end of the prompt and the
    start of each answer, so that prompt + answer fits in max_seq_length."""
    prompt_ids = encode_text(tokenizer, render(tokenizer, pair.prompt, add_generation_prompt=True))
    completions = []
    for answer in (pair.chosen, pair.rejected):
        whole = encode_text(tokenizer, render(tokenizer, pair.prompt + answer))
        if whole[:len(prompt_ids)] != prompt_ids:
            raise InputError("the chat template does not render the prompt as a token prefix of prompt + answer; "
                             "preference training needs that property")
        completions.append(whole[len(prompt_ids):])
    chosen_ids, rejected_ids = completions
    budget = max(1, max_seq_length - max(len(chosen_ids), len(rejected_ids)))
    prompt_ids = prompt_ids[-min(len(prompt_ids), max(budget, max_seq_length // 2)):]
    room = max_seq_length - len(prompt_ids)
    return PreferenceExample(prompt_ids, chosen_ids[:room], rejected_ids[:room])


def encode_preference_dataset(tokenizer, pairs: list[PreferencePair], max_seq_length: int,
                              name: str) -> list[PreferenceExample]:
    examples = [encode_pair(tokenizer, pair, max_seq_length) for pair in pairs]
    if not any(e.chosen_ids and e.rejected_ids for e in examples):
        raise InputError(f"{name}: no pair keeps an answer token within max_seq_length={max_seq_length}")
    return examples


def completion_labels(prompt_ids: list[int], completion_ids: list[int]) -> list[int]:
    """Labels of prompt + completion: -100 on the prompt, the completion's own ids after it."""
    return [IGNORE_INDEX] * len(prompt_ids) + list(completion_ids)
