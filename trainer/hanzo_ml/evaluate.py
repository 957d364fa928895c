"""Evaluation: the base model alone, base + adapter when one is given, and the current production model (a
merged model directory) when there is one, all on the same data in the same job so that the gate compares like
with like.

    python -m hanzo_ml eval --spec job.json

For each model: the mean NLL of the test file's assistant tokens (same masking as training), perplexity =
exp(loss), and exact match: greedy generation of the answer from the prompt (all messages but the last, then the
assistant header), stopped at <|end|>/eos, compared after strip() with the expected answer; with general_path,
the perplexity of general text (capability retention); with instructions_path, instruction following: the
greedy answer to each prompt of the instruction set, checked by code (hanzo_ml/instructions.py); with
safety_path, the share of the safety set's prompts the greedy answer refuses (hanzo_ml/safety.py). Writes an
EvalReport, and with scores_path the per-example scores the gate bootstraps its confidence intervals from.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from hanzo_ml.chat import (IGNORE_INDEX, Messages, encode_dataset, encode_prompt, encode_question, load_tokenizer,
                           read_chat_jsonl)
from hanzo_ml.files import atomic_write_json
from hanzo_ml.instructions import InstructionRecord, read_instructions
from hanzo_ml.merge import general_sequences, sequence_nlls
from hanzo_ml.safety import SafetyRecord, read_safety_set
from hanzo_ml.modeling import configure_torch, load_causal_lm, seed_everything
from hanzo_ml.spec import require_existing

log = logging.getLogger(__name__)

NUM_SAMPLES = 5
MAX_GENERAL_DOCUMENTS = 256
GENERATION_BATCH_SIZE = 32
MAX_LOG_PERPLEXITY = 700.0  # exp(700) still fits a float64; the report must stay finite JSON


def evaluate(spec, spec_path: Path) -> dict:
    require_existing(spec_path, "base_model_path", spec.base_model_path, kind="dir")
    require_existing(spec_path, "adapter_path", spec.adapter_path, kind="dir")
    require_existing(spec_path, "test_path", spec.test_path)
    production_path = getattr(spec, "production_model_path", None)
    general_path = getattr(spec, "general_path", None)
    require_existing(spec_path, "production_model_path", production_path, kind="dir")
    require_existing(spec_path, "general_path", general_path)
    instructions_path = getattr(spec, "instructions_path", None)
    require_existing(spec_path, "instructions_path", instructions_path)
    # Read before the tokenizer and any model: a bad instruction record fails the job at once, not after scoring.
    instructions = read_instructions(Path(instructions_path)) if instructions_path else []
    safety_path = getattr(spec, "safety_path", None)
    require_existing(spec_path, "safety_path", safety_path)
    safety = read_safety_set(Path(safety_path)) if safety_path else []
    tokenizer = load_tokenizer(Path(spec.base_model_path))
    conversations = read_chat_jsonl(Path(spec.test_path))
    data = EvalData(
        examples=encode_dataset(tokenizer, conversations, spec.max_seq_length, spec.test_path),
        prompts=[encode_prompt(tokenizer, messages, spec.max_seq_length) for messages in conversations],
        expected=[messages[-1]["content"] for messages in conversations],
        general=general_sequences(tokenizer, Path(general_path), MAX_GENERAL_DOCUMENTS, spec.max_seq_length)
        if general_path else None,
        instructions=instructions,
        instruction_prompts=[encode_question(tokenizer, r.messages, spec.max_seq_length) for r in instructions],
        safety=safety,
        safety_prompts=[encode_question(tokenizer, r.messages, spec.max_seq_length) for r in safety],
    )

    configure_torch(spec.threads)
    seed_everything(0)
    per_example: dict[str, dict] = {}
    model = load_causal_lm(Path(spec.base_model_path))
    base_scores, base_answers = score_model(model, tokenizer, data, spec.max_new_tokens, per_example, "base")
    log.info("base: %s", base_scores)
    production_scores = None
    if production_path:
        production = load_causal_lm(Path(production_path))
        production_scores, _ = score_model(production, tokenizer, data, spec.max_new_tokens, per_example,
                                           "production")
        del production
        log.info("production: %s", production_scores)
    tuned_scores, tuned_answers = None, None
    if spec.adapter_path:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, spec.adapter_path)
        model.eval()
        tuned_scores, tuned_answers = score_model(model, tokenizer, data, spec.max_new_tokens, per_example,
                                                  "tuned")
        log.info("tuned: %s", tuned_scores)

    scores_path = getattr(spec, "scores_path", None)
    if scores_path:
        atomic_write_json(Path(scores_path), {"models": per_example})
    report = {
        "base": base_scores,
        "tuned": tuned_scores,
        "production": production_scores,
        "scores_path": scores_path,
        "samples": [
            {"prompt": prompt_text(conversations[i]), "expected": data.expected[i], "base": base_answers[i],
             "tuned": tuned_answers[i] if tuned_answers else None}
            for i in range(min(NUM_SAMPLES, len(conversations)))
        ],
    }
    atomic_write_json(Path(spec.output_path), report)
    return report


def prompt_text(messages: Messages) -> str:
    """What the person asked: the last message before the answer (the system prompt is the same everywhere)."""
    return messages[-2]["content"] if len(messages) >= 2 else ""


@dataclass(frozen=True)
class EvalData:
    examples: list          # TokenizedExample per test conversation, assistant turns labelled
    prompts: list[list[int]]
    expected: list[str]
    general: list[list[int]] | None  # general-text documents, every token scored
    instructions: list[InstructionRecord]  # empty: instruction following not measured
    instruction_prompts: list[list[int]]
    safety: list[SafetyRecord]  # empty: safety not measured
    safety_prompts: list[list[int]]


def score_model(model, tokenizer, data: EvalData, max_new_tokens: int, per_example: dict, name: str
                ) -> tuple[dict, list[str]]:
    """Summary scores; per-example scores go into per_example[name] (test: NLL sum and token count of the
    assistant turns, exact match; general: NLL sum and token count of each document; instructions: each
    prompt's id, instruction kind, answer and whether the answer followed it; safety: each prompt's id, answer and
    whether it refused)."""
    masks = [[int(label != IGNORE_INDEX) for label in e.labels] for e in data.examples]
    test = sequence_nlls(model, [e.input_ids for e in data.examples], masks)
    loss = sum(n for n, _ in test) / max(1, sum(t for _, t in test))
    # One generation pass over both prompt sets: batches sorted by length stay full, so the instruction set
    # costs its own rows and no extra partly empty batch.
    generated = generate_answers(model, tokenizer, data.prompts + data.instruction_prompts + data.safety_prompts,
                                 max_new_tokens)
    ends = (len(data.prompts), len(data.prompts) + len(data.instruction_prompts))
    answers, instruction_answers, safety_answers = generated[:ends[0]], generated[ends[0]:ends[1]], generated[ends[1]:]
    matches = [int(answer.strip() == want.strip()) for answer, want in zip(answers, data.expected, strict=True)]
    scores = {"loss": loss, "perplexity": bounded_exp(loss),
              "exact_match": sum(matches) / len(matches), "num_examples": len(matches), "general_perplexity": None,
              "instruction_pass_rate": None, "safety_refusal_rate": None}
    per_example[name] = {"test": {"nll": [n for n, _ in test], "tokens": [t for _, t in test], "exact_match": matches}}
    if data.instructions:
        per_example[name]["instructions"] = instruction_scores(data.instructions, instruction_answers)
        followed = per_example[name]["instructions"]["pass"]
        scores["instruction_pass_rate"] = sum(followed) / len(followed)
    if data.safety:
        refused = [int(r.passed_by(a)) for r, a in zip(data.safety, safety_answers, strict=True)]
        per_example[name]["safety"] = {"id": [r.id for r in data.safety], "answer": safety_answers, "pass": refused}
        scores["safety_refusal_rate"] = sum(refused) / len(refused)
    if data.general:
        general = sequence_nlls(model, data.general)
        scores["general_perplexity"] = bounded_exp(sum(n for n, _ in general) / sum(t for _, t in general))
        per_example[name]["general"] = {"nll": [n for n, _ in general], "tokens": [t for _, t in general]}
    return scores, answers


def instruction_scores(records: list[InstructionRecord], answers: list[str]) -> dict:
    """Per prompt, index-aligned: what the scores artifact keeps to explain every pass and fail."""
    return {"id": [r.id for r in records], "kind": [r.kind for r in records], "answer": answers,
            "pass": [int(r.followed_by(a)) for r, a in zip(records, answers, strict=True)]}


def bounded_exp(loss: float) -> float:
    return math.exp(min(loss, MAX_LOG_PERPLEXITY))


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
