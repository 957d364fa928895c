"""Record forms and their normalization to the chat form the trainer reads: a port of datasets/ingest/records.ts,
contracts/dataset-records.ts and the form detection of datasets/ingest/record-readers.ts, with the same rules and
the same problem wording, so a file refused by the upload is refused here with the same words.

Each normalizer returns (record, problems): the normalized value, or None and [(field, message), ...] in the
order zod reports them (fields first, then the whole-record checks, which only run when the fields are valid).
"""
from __future__ import annotations

import json
import re
from typing import Any

ROLES = ("system", "user", "assistant")
Problems = list[tuple[str | None, str]]

FORM_LABELS = {
    "messages": 'chat form ("messages")',
    "instruction": 'instruction form ("instruction", "response")',
    "preference": 'preference form ("prompt", "chosen", "rejected")',
}
MIXED_FIELDS = ('record mixes fields of the chat ("messages"), instruction ("instruction", "response") and '
                'preference ("prompt", "chosen", "rejected") forms; use one form')
NO_FORM = ('expected a "messages" array (chat form), "instruction" and "response" fields (instruction form) or '
           '"prompt", "chosen" and "rejected" (preference form)')
_NON_BLANK = re.compile(r"\S")
_MISSING = object()


def detect_form(value: dict[str, Any]) -> tuple[str | None, str | None]:
    """(form, None) or (None, the problem): the keys decide, as record-readers.ts detectForm."""
    chat = "messages" in value
    instruction = "instruction" in value or "response" in value or "output" in value
    preference = "chosen" in value or "rejected" in value
    if chat and not instruction and not preference:
        return "messages", None
    if instruction and not chat and not preference:
        return "instruction", None
    if preference and not chat and not instruction:
        return "preference", None
    return None, MIXED_FIELDS if chat + instruction + preference > 1 else NO_FORM


def mixed_forms_message(form: str, first_form: str, first_line: int) -> str:
    return (f"mixed forms: this record is in {FORM_LABELS[form]}, but line {first_line} is in "
            f"{FORM_LABELS[first_form]}; use one form per file")


def normalize(form: str, value: dict[str, Any]) -> tuple[dict | None, Problems]:
    if form == "messages":
        return normalize_chat(value)
    if form == "instruction":
        return normalize_instruction(value)
    if form == "preference":
        return normalize_preference(value)
    raise ValueError(form)


# ---- the schemas, check by check -----------------------------------------------------------------

def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    return "object"


def preview(value: Any) -> str:
    text = "undefined" if value is _MISSING else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= 60 else f"{text[:57]}..."


def wrong_type(value: Any, expected: str) -> str:
    if value is _MISSING:
        return f"required field is missing (expected {expected})"
    return f"expected {expected}, got {type_name(value)}"


def check_text(value: Any, field: str, problems: Problems) -> None:
    """NonEmptyTextSchema: a string with a non-space character."""
    if not isinstance(value, str):
        problems.append((field, wrong_type(value, "string")))
    elif not _NON_BLANK.search(value):
        problems.append((field, "expected non-empty text"))


def check_optional_text(value: Any, field: str, problems: Problems) -> None:
    if value is not _MISSING and value is not None and not isinstance(value, str):
        problems.append((field, wrong_type(value, "string")))


def check_message(value: Any, field: str, problems: Problems) -> None:
    if not isinstance(value, dict):
        problems.append((field, wrong_type(value, "object")))
        return
    role = value.get("role", _MISSING)
    if role not in ROLES or not isinstance(role, str):
        problems.append((f"{field}.role", f"expected one of {', '.join(ROLES)}, got {preview(role)}"))
    check_text(value.get("content", _MISSING), f"{field}.content", problems)


def check_messages(value: Any, field: str, problems: Problems) -> None:
    if not isinstance(value, list):
        problems.append((field, wrong_type(value, "array")))
        return
    if not value:
        problems.append((field, "expected at least one message"))
    for i, message in enumerate(value):
        check_message(message, f"{field}[{i}]", problems)


def clean(messages: list[dict]) -> list[dict[str, str]]:
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def normalize_chat(value: dict[str, Any]) -> tuple[dict | None, Problems]:
    problems: Problems = []
    messages = value.get("messages", _MISSING)
    check_messages(messages, "messages", problems)
    if problems:
        return None, problems
    if not any(m["role"] == "user" for m in messages):
        problems.append(("messages", 'expected at least one message with role "user"'))
    last = messages[-1]
    if last["role"] != "assistant":
        problems.append((f"messages[{len(messages) - 1}].role",
                         f'the last message must be from the assistant, got "{last["role"]}"'))
    return (None, problems) if problems else ({"messages": clean(messages)}, [])


def normalize_instruction(value: dict[str, Any]) -> tuple[dict | None, Problems]:
    problems: Problems = []
    check_text(value.get("instruction", _MISSING), "instruction", problems)
    check_optional_text(value.get("input", _MISSING), "input", problems)
    for name in ("response", "output"):
        if name in value:
            check_text(value[name], name, problems)
    check_optional_text(value.get("system", _MISSING), "system", problems)
    if problems:
        return None, problems
    if "response" not in value and "output" not in value:
        return None, [("response", 'required field is missing (expected string; "output" is accepted as an alias)')]
    if "response" in value and "output" in value:
        return None, [("output", '"output" is an alias of "response"; give one of them, not both')]
    return instruction_to_chat(value), []


def instruction_to_chat(r: dict[str, Any]) -> dict:
    """system (when given) + user = instruction [+ blank line + input] + assistant = response."""
    messages = []
    system, given_input = r.get("system"), r.get("input")
    if system and _NON_BLANK.search(system):
        messages.append({"role": "system", "content": system})
    user = f"{r['instruction']}\n\n{given_input}" if given_input and _NON_BLANK.search(given_input) else r["instruction"]
    messages.append({"role": "user", "content": user})
    messages.append({"role": "assistant", "content": r["response"] if "response" in r else r["output"]})
    return {"messages": messages}


def check_answer(value: Any, field: str, problems: Problems) -> None:
    """A string, or a non-empty list of messages (zod union: the branch whose type matches reports)."""
    if isinstance(value, str):
        check_text(value, field, problems)
    elif isinstance(value, list):
        check_messages(value, field, problems)
    elif value is _MISSING:
        problems.append((field, "required field is missing (expected text or a list of assistant messages)"))
    else:
        problems.append((field, "expected text or a list of assistant messages"))


def as_messages(answer: str | list[dict]) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": answer}] if isinstance(answer, str) else clean(answer)


def normalize_preference(value: dict[str, Any]) -> tuple[dict | None, Problems]:
    problems: Problems = []
    check_messages(value.get("prompt", _MISSING), "prompt", problems)
    check_answer(value.get("chosen", _MISSING), "chosen", problems)
    check_answer(value.get("rejected", _MISSING), "rejected", problems)
    if problems:
        return None, problems
    prompt = value["prompt"]
    if prompt[-1]["role"] == "assistant":
        problems.append((f"prompt[{len(prompt) - 1}].role", 'the prompt must end before the answer, got "assistant"'))
    for name in ("chosen", "rejected"):
        if isinstance(value[name], list):
            for i, m in enumerate(value[name]):
                if m["role"] != "assistant":
                    problems.append((f"{name}[{i}].role", f'expected "assistant", got "{m["role"]}"'))
    chosen, rejected = as_messages(value["chosen"]), as_messages(value["rejected"])
    if chosen == rejected:
        problems.append(("rejected", "identical to chosen (a pair needs two different answers)"))
    if problems:
        return None, problems
    return {"prompt": clean(prompt), "chosen": chosen, "rejected": rejected}, []


def normalize_text(value: Any, field: str | None) -> tuple[dict | None, Problems]:
    """Plain text becomes one assistant turn (continued pre-training on raw text)."""
    problems: Problems = []
    check_text(value, field, problems)
    return (None, problems) if problems else ({"messages": [{"role": "assistant", "content": value}]}, [])
