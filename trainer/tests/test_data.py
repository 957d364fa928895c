"""Training data: preference pairs, named chat templates, prompt masking switched off, and packing that keeps
attention inside each example."""
from __future__ import annotations

import json

import pytest
import torch

from hanzo_ml.chat import IGNORE_INDEX, TokenizedExample, encode_dataset, load_tokenizer, render
from hanzo_ml.errors import InputError
from hanzo_ml.kernels import document_mask
from hanzo_ml.packing import collate_packed, pack
from hanzo_ml.preference import encode_pair, read_preference_jsonl
from helpers import demo_records, write_jsonl

PROMPT = [{"role": "system", "content": "Route the message."}, {"role": "user", "content": "My parcel is late."}]
PAIR = {"prompt": PROMPT, "chosen": [{"role": "assistant", "content": "shipping"}], "rejected": "billing"}


@pytest.fixture(scope="module")
def tokenizer(tiny_base_dir):
    return load_tokenizer(tiny_base_dir)


def write_lines(path, lines: list[str]):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# ---- preference pairs --------------------------------------------------------------------------

def test_a_preference_file_reads_into_pairs_with_string_answers_as_assistant_messages(tmp_path):
    path = write_jsonl(tmp_path / "pairs.jsonl", [PAIR, PAIR | {"rejected": "returns"}])
    pairs = read_preference_jsonl(path)
    assert len(pairs) == 2
    assert pairs[0].prompt == PROMPT
    assert pairs[0].rejected == [{"role": "assistant", "content": "billing"}]


@pytest.mark.parametrize("record, message", [
    ({"prompt": PROMPT, "chosen": "shipping"}, "3: rejected: is required"),
    ({"prompt": PROMPT, "chosen": [{"role": "user", "content": "x"}], "rejected": "b"},
     "3: chosen[0].role: expected 'assistant', got 'user'"),
    ({"prompt": PROMPT, "chosen": "same", "rejected": "same"}, "3: rejected: identical to chosen"),
    ({"prompt": PROMPT + [{"role": "assistant", "content": "x"}], "chosen": "a", "rejected": "b"},
     "3: prompt[2].role: the prompt must end before the answer"),
    ({"prompt": [{"role": "user", "content": 5}], "chosen": "a", "rejected": "b"},
     "3: prompt[0].content: expected a string, got 5"),
    ({"messages": PROMPT + [{"role": "assistant", "content": "x"}]}, "3: chosen: is required (this method trains "
                                                                      "on preference pairs, the record is a chat"),
    ({"prompt": PROMPT, "chosen": "  ", "rejected": "b"}, "3: chosen: the answer is empty"),
])
def test_a_bad_preference_record_names_file_line_and_field(tmp_path, record, message):
    path = write_lines(tmp_path / "pairs.jsonl", [json.dumps(PAIR), json.dumps(PAIR), json.dumps(record)])
    with pytest.raises(InputError) as error:
        read_preference_jsonl(path)
    assert str(error.value).startswith(f"{path}:{message}")


def test_a_pair_tokenizes_into_the_prompt_and_what_each_answer_adds(tokenizer):
    pair = read_preference_jsonl_from(PAIR)
    example = encode_pair(tokenizer, pair, max_seq_length=256)
    prompt_text = render(tokenizer, PROMPT, add_generation_prompt=True)
    assert tokenizer.decode(example.prompt_ids) == prompt_text
    assert tokenizer.decode(example.chosen_ids) == "shipping<|end|>"
    assert tokenizer.decode(example.rejected_ids) == "billing<|end|>"


def test_an_over_long_pair_keeps_the_end_of_the_prompt_and_fits_max_seq_length(tokenizer):
    long_prompt = [{"role": "user", "content": "word " * 200}]
    example = encode_pair(tokenizer, read_preference_jsonl_from(PAIR | {"prompt": long_prompt}), 64)
    assert len(example.prompt_ids) + max(len(example.chosen_ids), len(example.rejected_ids)) <= 64
    assert tokenizer.decode(example.prompt_ids).endswith("<|assistant|>\n")


def read_preference_jsonl_from(record: dict):
    from hanzo_ml.preference import parse_preference_record

    return parse_preference_record(json.dumps(record), "memory:1")


# ---- templates and masking ---------------------------------------------------------------------

def test_a_named_chat_template_replaces_the_models_and_still_masks_the_prompt(tiny_base_dir):
    chatml = load_tokenizer(tiny_base_dir, "chatml")
    conversation = PROMPT + [{"role": "assistant", "content": "shipping"}]
    assert render(chatml, conversation).startswith("<|im_start|>system\nRoute the message.<|im_end|>\n")
    [example] = encode_dataset(chatml, [conversation], 256, "memory")
    answer = [t for t, label in zip(example.input_ids, example.labels) if label != IGNORE_INDEX]
    assert chatml.decode(answer) == "shipping<|im_end|>\n"


def test_an_unknown_chat_template_name_is_refused_naming_the_field(tiny_base_dir):
    with pytest.raises(InputError, match='data.chat_template: expected "model" or one of chatml, llama3, zephyr, '
                                         'got "vicuna"'):
        load_tokenizer(tiny_base_dir, "vicuna")


def test_without_prompt_masking_every_token_is_a_target(tokenizer):
    conversation = PROMPT + [{"role": "assistant", "content": "shipping"}]
    [masked] = encode_dataset(tokenizer, [conversation], 256, "memory")
    [unmasked] = encode_dataset(tokenizer, [conversation], 256, "memory", mask_prompt=False)
    assert unmasked.labels == unmasked.input_ids
    assert masked.num_target_tokens < unmasked.num_target_tokens


# ---- packing -----------------------------------------------------------------------------------

def test_packing_fills_rows_up_to_max_seq_length_in_dataset_order():
    examples = [TokenizedExample([1] * n, [1] * n) for n in (5, 4, 3, 6, 2)]
    rows = pack(examples, max_seq_length=10)
    assert [[len(e.input_ids) for e in row.examples] for row in rows] == [[5, 4], [3, 6], [2]]
    assert all(row.length <= 10 for row in rows)


def test_a_packed_example_sees_only_itself_so_its_logits_equal_those_of_the_example_alone(tiny_base_dir, tokenizer):
    from hanzo_ml.modeling import collate, load_causal_lm

    model = load_causal_lm(tiny_base_dir)
    examples = encode_dataset(tokenizer, [r["messages"] for r in demo_records(2)], 120, "memory")
    batch = collate_packed(pack(examples, max_seq_length=240), pad_id=0)
    assert batch["input_ids"].shape[0] == 1  # both share one row
    with torch.no_grad():
        packed = model(input_ids=batch["input_ids"], attention_mask=document_mask(batch["segment_ids"]),
                       position_ids=batch["position_ids"]).logits                          # (1, T, V)
        start = len(examples[0].input_ids)
        alone = model(**{k: v for k, v in collate([examples[1]], 0).items() if k != "labels"}).logits
    n = len(examples[1].input_ids)
    assert torch.allclose(packed[0, start:start + n], alone[0], atol=1e-5)
    # The first token of each later example is not a target predicted from the previous example.
    assert batch["labels"][0, start] == IGNORE_INDEX
    assert batch["position_ids"][0, start] == 0


def test_a_preference_pair_reads_as_chat_so_eval_and_merge_take_preference_splits(tmp_path):
    from hanzo_ml.chat import read_chat_jsonl

    path = write_jsonl(tmp_path / "test.jsonl", [PAIR])
    assert read_chat_jsonl(path) == [PROMPT + [{"role": "assistant", "content": "shipping"}]]
