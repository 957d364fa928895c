"""Merge: the merged model computes what base + adapter computes; the report and the perplexity definition."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from hanzo_ml.chat import encode_conversation, load_tokenizer
from hanzo_ml.cli import main
from hanzo_ml.files import sha256_file
from hanzo_ml.merge import reference_perplexity
from hanzo_ml.modeling import load_causal_lm
from helpers import demo_records, read_json, write_jsonl, write_spec


MAX_SEQ = 192


@pytest.fixture(scope="module")
def trained_looking_adapter(tiny_base_dir, tmp_path_factory) -> Path:
    """An adapter whose B matrices are non-zero, so merging really changes the weights."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(1)
    model = get_peft_model(load_causal_lm(tiny_base_dir),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.05)
    out = tmp_path_factory.mktemp("adapter")
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def merged(tiny_base_dir, trained_looking_adapter, tmp_path_factory):
    root = tmp_path_factory.mktemp("merge")
    heldout = write_jsonl(root / "heldout.jsonl", demo_records(6))
    general = root / "general.txt"
    general.write_text("The kettle ships to Oslo.\n\nA review of the lamp.\n\n\n\nThe desk answers billing.\n")
    spec = {"kind": "merge", "job_name": "merge", "base_model_path": str(tiny_base_dir),
            "adapter_path": str(trained_looking_adapter), "output_dir": str(root / "merged"),
            "heldout_path": str(heldout), "reference_path": str(root / "merge-report.json"),
            "general_path": str(general), "max_seq_length": MAX_SEQ, "max_sequences": 4, "threads": 1}
    assert main(["merge", "--spec", str(write_spec(root / "job.json", spec))]) == 0
    return root, read_json(root / "merge-report.json"), heldout


def test_the_report_lists_every_merged_file_with_its_checksum(merged):
    root, report, _ = merged
    assert report["merged_dir"] == str(root / "merged")
    listed = {f["path"]: f for f in report["files"]}
    on_disk = {p.name for p in (root / "merged").iterdir()}
    assert set(listed) == on_disk
    assert {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"} <= on_disk
    for name, entry in listed.items():
        assert entry["sha256"] == sha256_file(root / "merged" / name)
        assert entry["size_bytes"] == (root / "merged" / name).stat().st_size


def test_the_merged_config_carries_a_flat_rope_theta_and_float32_weights(merged):
    root, _, _ = merged
    config = read_json(root / "merged" / "config.json")
    assert config["rope_theta"] == config["rope_parameters"]["rope_theta"] == 10000.0
    with safe_open(root / "merged" / "model.safetensors", framework="pt") as weights:
        assert {weights.get_tensor(k).dtype for k in weights.keys()} == {torch.float32}


def test_the_merged_model_computes_what_base_plus_adapter_computes(merged, tiny_base_dir, trained_looking_adapter):
    from peft import PeftModel

    root, _, _ = merged
    ids = torch.tensor([read_json(root / "heldout-tokens.json")["sequences"][0]])
    unmerged = PeftModel.from_pretrained(load_causal_lm(tiny_base_dir), str(trained_looking_adapter)).eval()
    base = load_causal_lm(tiny_base_dir)
    with torch.no_grad():
        expected = unmerged(input_ids=ids).logits
        actual = load_causal_lm(root / "merged")(input_ids=ids).logits
        assert not torch.allclose(base(input_ids=ids).logits, expected, atol=1e-3)  # the adapter matters
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)


def test_heldout_tokens_are_the_rendered_conversations_with_the_assistant_turns_flagged(merged, tiny_base_dir):
    root, report, heldout = merged
    assert report["heldout_tokens_path"] == str(root / "heldout-tokens.json")
    tokenizer = load_tokenizer(tiny_base_dir)
    records = [r["messages"] for r in demo_records(4)]
    written = read_json(root / "heldout-tokens.json")
    sequences, masks = written["sequences"], written["target_mask"]
    assert sequences == [encode_conversation(tokenizer, m)[:MAX_SEQ] for m in records]
    assert sequences[0][0] == tokenizer.bos_token_id
    for ids, mask, messages in zip(sequences, masks, records, strict=True):
        flagged = [t for t, f in zip(ids, mask, strict=True) if f]
        # Exactly the answer and the <|end|> that closes it: the tokens the fine-tune learns to produce.
        assert tokenizer.decode(flagged) == messages[-1]["content"] + "<|end|>"


def test_general_text_is_scored_on_every_token_for_the_merged_model_and_its_base(merged, tiny_base_dir):
    root, report, _ = merged
    tokenizer = load_tokenizer(tiny_base_dir)
    sequences = read_json(root / "general-tokens.json")["sequences"]
    documents = ["The kettle ships to Oslo.", "A review of the lamp.", "The desk answers billing."]
    assert sequences == [tokenizer.encode(d, add_special_tokens=False) for d in documents]
    assert report["general_num_tokens"] == sum(len(s) - 1 for s in sequences)
    assert report["general_reference_perplexity"] == pytest.approx(
        reference_perplexity(load_causal_lm(root / "merged"), sequences)[0], rel=1e-6)
    assert report["base_general_perplexity"] == pytest.approx(
        reference_perplexity(load_causal_lm(tiny_base_dir), sequences)[0], rel=1e-6)
    assert report["general_reference_perplexity"] != pytest.approx(report["base_general_perplexity"], rel=1e-4)


def test_reference_perplexity_is_exp_of_the_token_weighted_mean_nll_of_the_assistant_turns(merged):
    """Independent check through transformers' own shifted loss with -100 labels outside the flagged tokens."""
    root, report, _ = merged
    model = load_causal_lm(root / "merged")
    written = read_json(root / "heldout-tokens.json")
    total, scored = 0.0, 0
    with torch.no_grad():
        for ids, mask in zip(written["sequences"], written["target_mask"], strict=True):
            labels = torch.tensor([[t if f else -100 for t, f in zip(ids, mask, strict=True)]])
            n = sum(mask[1:])
            total += model(input_ids=torch.tensor([ids]), labels=labels).loss.item() * n
            scored += n
    assert report["num_tokens"] == scored < sum(len(s) - 1 for s in written["sequences"])
    assert report["reference_perplexity"] == pytest.approx(math.exp(total / scored), rel=1e-5)
