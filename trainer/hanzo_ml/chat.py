"""Chat data: reading normalized JSONL, rendering with the model's chat template, tokenizing with prompt masking.

Torch-free on purpose: count-tokens imports this module and must start fast.

A record is `{"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}` whose last message is
the assistant's answer; a preference pair (`prompt`/`chosen`/`rejected`, see preference.py) reads as its prompt
followed by the chosen answer. Training puts loss on the assistant turns only; every other token gets the label -100.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from hanzo_ml.errors import InputError
from hanzo_ml.files import read_jsonl_records

log = logging.getLogger(__name__)

ROLES = ("system", "user", "assistant")
IGNORE_INDEX = -100  # the label torch's cross_entropy skips

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class TokenizedExample:
    input_ids: list[int]
    labels: list[int]  # same length as input_ids; IGNORE_INDEX outside assistant turns

    @property
    def num_target_tokens(self) -> int:
        return sum(1 for label in self.labels if label != IGNORE_INDEX)

    def truncated(self, max_seq_length: int) -> "TokenizedExample":
        return TokenizedExample(self.input_ids[:max_seq_length], self.labels[:max_seq_length])


# ---- reading -----------------------------------------------------------------------------------

def read_chat_jsonl(path: Path, allow_empty: bool = False, training_method: str | None = None) -> list[Messages]:
    """Every record of a normalized JSONL file; the first bad record raises InputError naming its line.
    training_method: the chat method this file trains; it must hold conversations, not preference pairs."""
    return read_jsonl_records(path, lambda line, where: parse_record(line, where, training_method), allow_empty)


def parse_record(line: str, where: str, training_method: str | None = None) -> Messages:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise InputError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from e
    if isinstance(record, dict) and "messages" not in record and "chosen" in record:
        if training_method is not None:  # training on the chosen half alone would silently drop the preference
            raise InputError(f"{where}: messages: this is a preference pair (prompt/chosen/rejected); method "
                             f"{training_method} trains on chat records {{\"messages\": [...]}}: use method dpo "
                             "or orpo for preference pairs")
        # A preference pair reads as the conversation it prefers: prompt + chosen answer. Evaluation and the
        # held-out perplexity of a dpo/orpo pipeline score the tuned model on the answers it was taught to prefer.
        from hanzo_ml.preference import parse_preference_record

        pair = parse_preference_record(line, where)
        return pair.prompt + pair.chosen
    if not isinstance(record, dict) or not isinstance(record.get("messages"), list):
        raise InputError(f'{where}: messages: expected an object {{"messages": [...]}}')
    messages = record["messages"]
    if not messages:
        raise InputError(f"{where}: messages: expected at least one message")
    for i, message in enumerate(messages):
        check_message(message, f"{where}: messages[{i}]")
    if messages[-1]["role"] != "assistant":
        raise InputError(f"{where}: messages[{len(messages) - 1}].role: the last message must be the "
                         f"assistant's answer, got '{messages[-1]['role']}'")
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def check_message(message: object, where: str) -> None:
    if not isinstance(message, dict):
        raise InputError(f"{where}: expected an object with role and content")
    if message.get("role") not in ROLES:
        raise InputError(f"{where}.role: expected one of {', '.join(ROLES)}, got {json.dumps(message.get('role'))}")
    if not isinstance(message.get("content"), str):
        raise InputError(f"{where}.content: expected a string, got {json.dumps(message.get('content'))}")


# ---- rendering and tokenizing ------------------------------------------------------------------

# Named templates for bases whose tokenizer has none, or to train in another model family's format. Each renders
# prefixes as token prefixes (prompt masking checks it) and closes an assistant turn with the tokenizer's eos.
NAMED_TEMPLATES = {
    "chatml": ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
               "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
               "{% endif %}"),
    "llama3": ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
               "'<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}{% endfor %}"
               "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"),
    "zephyr": ("{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + "
               "'\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"),
}
MODEL_TEMPLATE = "model"  # the tokenizer's own chat template


def load_tokenizer(model_dir: Path, chat_template: str = MODEL_TEMPLATE):
    """The model's own fast tokenizer (tokenizer.json + chat template); never reaches the network.

    chat_template: "model" keeps the tokenizer's template; a name from NAMED_TEMPLATES replaces it.
    """
    from transformers import PreTrainedTokenizerFast

    if chat_template != MODEL_TEMPLATE and chat_template not in NAMED_TEMPLATES:
        raise InputError(f"data.chat_template: expected \"{MODEL_TEMPLATE}\" or one of "
                         f"{', '.join(sorted(NAMED_TEMPLATES))}, got {json.dumps(chat_template)}")
    if not (Path(model_dir) / "tokenizer.json").is_file():
        raise InputError(f"{model_dir}: no tokenizer.json (not a model directory)")
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(model_dir), local_files_only=True)
    if chat_template != MODEL_TEMPLATE:
        tokenizer.chat_template = NAMED_TEMPLATES[chat_template]
    if not tokenizer.chat_template:
        raise InputError(f"{model_dir}: the tokenizer has no chat template (name one with data.chat_template)")
    return tokenizer


def render(tokenizer, messages: Messages, add_generation_prompt: bool = False) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def encode_text(tokenizer, text: str) -> list[int]:
    # The template already wrote every special token (bos included); adding more would change the sequence.
    return tokenizer.encode(text, add_special_tokens=False)


def encode_conversation(tokenizer, messages: Messages) -> list[int]:
    return encode_text(tokenizer, render(tokenizer, messages))


def encode_prompt(tokenizer, messages: Messages, max_seq_length: int) -> list[int]:
    """The prompt for the last answer: every message but the last, then the assistant header.
    Over-long prompts lose their oldest tokens: the end of a prompt is what the answer depends on."""
    return encode_question(tokenizer, messages[:-1], max_seq_length)


def encode_question(tokenizer, messages: Messages, max_seq_length: int) -> list[int]:
    """A conversation that awaits its answer (it ends before the assistant's turn), then the assistant header."""
    ids = encode_text(tokenizer, render(tokenizer, messages, add_generation_prompt=True))
    return ids[-max_seq_length:]


def encode_example(tokenizer, messages: Messages, max_seq_length: int) -> TokenizedExample:
    return label_assistant_turns(tokenizer, messages).truncated(max_seq_length)


def label_assistant_turns(tokenizer, messages: Messages) -> TokenizedExample:
    """Tokens of the whole conversation, labels only on assistant turns (content and closing <|end|>).

    Each assistant turn spans from the end of the rendered prompt before it (add_generation_prompt=True) to the
    end of the rendered conversation up to and including it. That needs the template's prefix property: the
    tokens of a rendered prefix are a prefix of the tokens of the whole; we check it rather than assume it.
    """
    input_ids = encode_conversation(tokenizer, messages)
    labels = [IGNORE_INDEX] * len(input_ids)
    for turn, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        start = len(encode_text(tokenizer, render(tokenizer, messages[:turn], add_generation_prompt=True)))
        end_ids = encode_text(tokenizer, render(tokenizer, messages[: turn + 1]))
        if input_ids[: len(end_ids)] != end_ids or start > len(end_ids):
            raise InputError("the chat template does not render a conversation's prefixes as token prefixes; "
                             "prompt masking needs that property")
        labels[start:len(end_ids)] = input_ids[start:len(end_ids)]
    return TokenizedExample(input_ids=input_ids, labels=labels)


def label_every_token(tokenizer, messages: Messages) -> TokenizedExample:
    """No prompt masking: every token after the first is a target (continued pre-training on chat text)."""
    input_ids = encode_conversation(tokenizer, messages)
    return TokenizedExample(input_ids=input_ids, labels=list(input_ids))


def encode_dataset(tokenizer, conversations: list[Messages], max_seq_length: int, name: str,
                   mask_prompt: bool = True) -> list[TokenizedExample]:
    label = label_assistant_turns if mask_prompt else label_every_token
    full = [label(tokenizer, messages) for messages in conversations]
    examples = [example.truncated(max_seq_length) for example in full]
    truncated = sum(1 for example in full if len(example.input_ids) > max_seq_length)
    if truncated:
        log.warning("%s: %d of %d records are longer than max_seq_length=%d and were truncated",
                    name, truncated, len(examples), max_seq_length)
    empty = sum(1 for e in examples if e.num_target_tokens == 0)
    if empty == len(examples):
        raise InputError(f"{name}: no record keeps an assistant token within max_seq_length={max_seq_length}")
    return examples
