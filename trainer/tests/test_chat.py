"""Rendering with the chat template and prompt masking: loss only on the assistant's tokens."""
from __future__ import annotations

import pytest

from hanzo_ml.chat import (IGNORE_INDEX, encode_dataset, encode_example, encode_prompt, load_tokenizer,
                           parse_record, render)
from hanzo_ml.errors import InputError

CONVERSATION = [
    {"role": "system", "content": "Route the message."},
    {"role": "user", "content": "My parcel is late."},
    {"role": "assistant", "content": "shipping"},
]


@pytest.fixture(scope="module")
def tokenizer(tiny_base_dir):
    return load_tokenizer(tiny_base_dir)


def test_the_template_renders_turns_between_special_tokens(tokenizer):
    assert render(tokenizer, CONVERSATION) == (
        "<|bos|><|system|>\nRoute the message.<|end|><|user|>\nMy parcel is late.<|end|>"
        "<|assistant|>\nshipping<|end|>"
    )
    assert render(tokenizer, CONVERSATION[:-1], add_generation_prompt=True).endswith("<|end|><|assistant|>\n")


def test_labels_are_minus_100_everywhere_but_the_assistant_answer(tokenizer):
    example = encode_example(tokenizer, CONVERSATION, max_seq_length=256)
    assert len(example.labels) == len(example.input_ids)
    prompt_length = len(encode_prompt(tokenizer, CONVERSATION, max_seq_length=256))
    answer = tokenizer.encode("shipping<|end|>", add_special_tokens=False)
    assert example.labels[:prompt_length] == [IGNORE_INDEX] * prompt_length
    assert example.labels[prompt_length:] == answer
    assert example.input_ids[prompt_length:] == answer
    assert example.labels[-1] == tokenizer.convert_tokens_to_ids("<|end|>")  # the model learns to stop


def test_every_assistant_turn_of_a_multi_turn_conversation_is_trained(tokenizer):
    conversation = CONVERSATION + [{"role": "user", "content": "And my refund?"},
                                   {"role": "assistant", "content": "returns"}]
    example = encode_example(tokenizer, conversation, max_seq_length=256)
    labelled = tokenizer.decode([t for t in example.labels if t != IGNORE_INDEX])
    assert labelled == "shipping<|end|>returns<|end|>"


def test_truncation_cuts_inputs_and_labels_alike(tokenizer):
    full = encode_example(tokenizer, CONVERSATION, max_seq_length=256)
    short = encode_example(tokenizer, CONVERSATION, max_seq_length=len(full.input_ids) - 1)
    assert short.input_ids == full.input_ids[:-1]
    assert short.labels == full.labels[:-1]


def test_a_dataset_whose_answers_are_all_truncated_away_is_refused(tokenizer):
    with pytest.raises(InputError, match="no record keeps an assistant token within max_seq_length=4"):
        encode_dataset(tokenizer, [CONVERSATION], max_seq_length=4, name="train.jsonl")


def test_long_prompts_keep_their_end_for_generation(tokenizer):
    full = encode_prompt(tokenizer, CONVERSATION, max_seq_length=256)
    assert encode_prompt(tokenizer, CONVERSATION, max_seq_length=5) == full[-5:]


@pytest.mark.parametrize("line, message", [
    ("not json", "train.jsonl:7: not valid JSON"),
    ('{"text": "hi"}', 'train.jsonl:7: messages: expected an object {"messages": [...]}'),
    ('{"messages": []}', "train.jsonl:7: messages: expected at least one message"),
    ('{"messages": [{"role": "user", "content": 5}]}', "train.jsonl:7: messages[0].content: expected a string, got 5"),
    ('{"messages": [{"role": "user", "content": "hi"}]}',
     "train.jsonl:7: messages[0].role: the last message must be the assistant's answer, got 'user'"),
])
def test_bad_records_are_reported_with_line_and_field(line, message):
    with pytest.raises(InputError) as error:
        parse_record(line, "train.jsonl:7")
    assert str(error.value).startswith(message)


PAIR = ('{"prompt": [{"role": "user", "content": "2+2?"}], "chosen": [{"role": "assistant", "content": "4"}], '
        '"rejected": [{"role": "assistant", "content": "5"}]}')


def test_a_preference_pair_in_a_chat_methods_training_file_is_refused_naming_the_method():
    with pytest.raises(InputError, match=r"train.jsonl:7: messages: this is a preference pair \(prompt/chosen/"
                                         r"rejected\); method lora trains on chat records .*use method dpo or orpo"):
        parse_record(PAIR, "train.jsonl:7", training_method="lora")


def test_evaluation_reads_a_preference_pair_as_the_conversation_it_prefers():
    assert parse_record(PAIR, "test.jsonl:1") == [{"role": "user", "content": "2+2?"},
                                                   {"role": "assistant", "content": "4"}]
