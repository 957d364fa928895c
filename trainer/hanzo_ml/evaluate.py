"""Evaluation: the base model alone, and base + adapter when one is given.

    python -m hanzo_ml eval --spec job.json

For each model: the mean NLL of the test file's assistant tokens (same masking as training), perplexity =
exp(loss), and exact match: greedy generation of the answer from the prompt (all messages but the last, then the
assistant header), stopped at <|end|>/eos, compared after strip() with the expected answer. Writes an EvalReport.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path

import torch

from hanzo_ml.chat import Messages, encode_dataset, encode_prompt, load_tokenizer, read_chat_jsonl
from hanzo_ml.files import atomic_write_json
from hanzo_ml.modeling import configure_torch, load_causal_lm, mean_token_nll, seed_everything
from hanzo_ml.spec import require_existing

log = logging.getLogger(__name__)

NUM_SAMPLES = 5
GENERATION_BATCH_SIZE = 32
MAX_LOG_PERPLEXITY = 700.0  # exp(700) still fits a float64; the report must stay finite JSON


def evaluate(spec, spec_path: Path) -> dict:
    require_existing(spec_path, "base_model_path", spec.base_model_path, kind="dir")
    require_existing(spec_path, "adapter_path", spec.adapter_path, kind="dir")
    require_existing(spec_path, "test_path", spec.test_path)
    tokenizer = load_tokenizer(Path(spec.base_model_path))
    conversations = read_chat_jsonl(Path(spec.test_path))
    examples = encode_dataset(tokenizer, conversations, spec.max_seq_length, spec.test_path)
    prompts = [encode_prompt(tokenizer, messages, spec.max_seq_length) for messages in conversations]
    expected = [messages[-1]["content"] for messages in conversations]

    configure_torch(spec.threads)
    seed_everything(0)
    model = load_causal_lm(Path(spec.base_model_path))
    base_scores, base_answers = score_model(model, tokenizer, examples, prompts, expected, spec.max_new_tokens)
    log.info("base: %s", base_scores)
    tuned_scores, tuned_answers = None, None
    if spec.adapter_path:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, spec.adapter_path)
        model.eval()
        tuned_scores, tuned_answers = score_model(model, tokenizer, examples, prompts, expected,
                                                  spec.max_new_tokens)
        log.info("tuned: %s", tuned_scores)

    report = {
        "base": base_scores,
        "tuned": tuned_scores,
        "samples": [
            {"prompt": prompt_text(conversations[i]), "expected": expected[i], "base": base_answers[i],
             "tuned": tuned_answers[i] if tuned_answers else None}
            for i in range(min(NUM_SAMPLES, len(conversations)))
        ],
    }
    atomic_write_json(Path(spec.output_path), report)
    return report


def prompt_text(messages: Messages) -> str:
    """What the person asked: the last message before the answer (the system prompt is the same everywhere)."""
    return messages[-2]["content"] if len(messages) >= 2 else ""


def score_model(model, tokenizer, examples, prompts, expected, max_new_tokens) -> tuple[dict, list[str]]:
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    loss, _ = mean_token_nll(model, examples, pad_id)
    answers = generate_answers(model, tokenizer, prompts, max_new_tokens)
    matches = sum(answer.strip() == want.strip() for answer, want in zip(answers, expected, strict=True))
    scores = {"loss": loss, "perplexity": math.exp(min(loss, MAX_LOG_PERPLEXITY)),
              "exact_match": matches / len(expected), "num_examples": len(expected)}
    return scores, answers


def stop_token_ids(tokenizer) -> list[int]:
    ids = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|end|>")}
    return sorted(i for i in ids if i is not None and i != tokenizer.unk_token_id)


@torch.no_grad()
def generate_answers(model, tokenizer, prompts: list[list[int]], max_new_tokens: int) -> list[str]:
    """Greedy answers, batched: prompts sorted by length (little padding), left-padded so that every row's
    next token sits at the last position, then put back in the original order."""
    stop_ids = stop_token_ids(tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_ids[0]
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    answers: list[str] = [""] * len(prompts)
    for start in range(0, len(order), GENERATION_BATCH_SIZE):
        rows = order[start:start + GENERATION_BATCH_SIZE]
        longest = max(len(prompts[i]) for i in rows)
        input_ids = torch.full((len(rows), longest), pad_id, dtype=torch.long)         # (B, T)
        attention_mask = torch.zeros((len(rows), longest), dtype=torch.long)           # (B, T)
        for r, i in enumerate(rows):
            input_ids[r, longest - len(prompts[i]):] = torch.tensor(prompts[i])
            attention_mask[r, longest - len(prompts[i]):] = 1
        generated = model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=False,
                                   max_new_tokens=max_new_tokens, eos_token_id=stop_ids, pad_token_id=pad_id)
        new_tokens = generated[:, longest:].tolist()                                   # (B, <= max_new_tokens)
        for r, i in enumerate(rows):
            answers[i] = tokenizer.decode(until_stop(new_tokens[r], stop_ids), skip_special_tokens=True)
    return answers


def until_stop(tokens: list[int], stop_ids: list[int]) -> list[int]:
    for position, token in enumerate(tokens):
        if token in stop_ids:
            return tokens[:position]
    return tokens
