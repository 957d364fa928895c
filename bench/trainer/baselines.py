"""The two transformers `Trainer` baselines of bench/trainer/gpu.py, each one run in its own process.

- baseline: `Trainer` + peft as most users run it: each batch padded to its longest example
  (`DataCollatorForSeq2Seq`), SDPA attention, bf16 autocast.
- rival: the same `Trainer` as a user who tunes for speed configures it: padding-free packing
  (`DataCollatorWithFlattening`: the step's examples as one flattened row, positions restarting per example),
  Liger kernels (`use_liger_kernel=True`) and FlexAttention, which turns the restarted positions into a document
  block mask and skips the masked blocks. On CPU (--smoke) FlexAttention has no backward and Liger needs
  CUDA/Triton, so there the rival runs SDPA without Liger and its row says so.

Both see the same examples per step (as many as hold the tokens ours packs into --rows rows), the same model,
learning rate, warmup, steps and LoRA settings as ours; tokens are the non-padding tokens of each batch.
"""
from __future__ import annotations

import time
from pathlib import Path

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LEARNING_RATE = {"full": 2e-5, "lora": 2e-4, "qlora": 2e-4}


def rival_setup(device: str) -> dict:
    """How the rival runs on this device: the attention implementation, Liger or not, and why."""
    if device == "cuda":
        return {"attention": "flex_attention", "liger": True, "note": None}
    return {"attention": "sdpa", "liger": False,
            "note": "CPU smoke: SDPA without Liger (FlexAttention has no CPU backward; Liger needs CUDA/Triton)"}


def run_trainer(args, model_dir: Path, files: dict[str, Path], work: Path, rival: bool) -> dict:
    import torch
    from transformers import Trainer, TrainingArguments

    from hanzo_ml.chat import encode_dataset, load_tokenizer, read_chat_jsonl

    tokenizer = load_tokenizer(model_dir)
    examples = encode_dataset(tokenizer, read_chat_jsonl(files["train"]), args.seq_len, "train")
    rows = [{"input_ids": e.input_ids, "labels": e.labels} for e in examples]
    mean_length = sum(len(r["input_ids"]) for r in rows) / len(rows)
    per_batch = max(1, round(args.rows * args.seq_len / mean_length))  # the tokens ours packs into --rows rows
    setup = rival_setup(args.device) if rival else {"attention": "sdpa", "liger": False, "note": None}

    model = load_model(args, model_dir, setup["attention"])
    collate, counted = counting_collator(tokenizer, flatten=rival)
    steps: list[tuple[int, int, float]] = []
    bf16 = args.precision == "bf16" or (args.precision == "auto" and args.device == "cuda")
    training_args = TrainingArguments(
        output_dir=str(work / "hf"), max_steps=args.steps, per_device_train_batch_size=per_batch,
        gradient_accumulation_steps=1, learning_rate=LEARNING_RATE[args.method], warmup_steps=args.steps // 10,
        lr_scheduler_type="linear", bf16=bf16, use_cpu=args.device == "cpu", logging_strategy="no",
        save_strategy="no", report_to=[], dataloader_drop_last=True, remove_unused_columns=False, seed=42,
        use_liger_kernel=setup["liger"])
    profiler = step_profiler(args)
    Trainer(model=model, args=training_args, train_dataset=rows, data_collator=collate,
            callbacks=[clock(steps, counted, torch, profiler)]).train()
    print_profile(profiler)
    # The collator runs a batch ahead (prefetch): tokens are counted when collated, so the counter leads by at
    # most one batch; over the measured steps that is < 1 / steps of the total.
    result = measured(steps, args.skip)
    result.update(examples_per_batch=per_batch, attention=setup["attention"], liger=setup["liger"])
    if setup["note"]:
        result["note"] = setup["note"]
    return result


def measured(steps: list[tuple[int, int, float]], skip: int) -> dict:
    """steps: (step, tokens so far, training seconds so far); the first `skip` steps are warm-up. The first step's
    seconds hold the one-time costs (kernel compilation, autotuning, allocator growth)."""
    import torch

    (_, tokens0, seconds0), (_, tokens1, seconds1) = steps[min(skip, len(steps) - 2)], steps[-1]
    return {"tokens": tokens1 - tokens0, "seconds": seconds1 - seconds0,
            "tokens_per_second": (tokens1 - tokens0) / max(seconds1 - seconds0, 1e-9),
            "first_step_seconds": steps[0][2],
            "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None}


def load_model(args, model_dir: Path, attention: str):
    """fp32 weights (bf16 autocast, as `Trainer(bf16=True)` runs them); QLoRA: NF4 base; LoRA: peft adapters."""
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    load = {"dtype": torch.float32, "attn_implementation": attention}
    if args.method == "qlora":
        load["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                         bnb_4bit_use_double_quant=True,
                                                         bnb_4bit_compute_dtype=getattr(torch, args.compute_dtype))
        load["device_map"] = {"": 0 if args.device == "cuda" else "cpu"}
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, **load)
    if args.method != "full":
        from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
        if args.method == "qlora":
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=TARGETS,
                                                 task_type="CAUSAL_LM"))
    return model


def counting_collator(tokenizer, flatten: bool):
    """The batch collator and the running count of the non-padding tokens it has handed out."""
    from transformers import DataCollatorForSeq2Seq, DataCollatorWithFlattening

    counted = {"tokens": 0}
    inner = (DataCollatorWithFlattening(return_position_ids=True, separator_id=-100) if flatten
             else DataCollatorForSeq2Seq(tokenizer, padding="longest", label_pad_token_id=-100))

    def collate(batch):
        out = inner(batch)
        # flattened: one row of (1, sum of lengths), no padding; padded: the attention mask marks the real tokens
        counted["tokens"] += int(out["input_ids"].numel()) if flatten else int(out["attention_mask"].sum())
        return out
    return collate, counted


def step_profiler(args):
    """--profile: torch.profiler over the 6 steps after the warm-up ones (the run's tokens/s then includes the
    profiler's overhead, so a profiled run writes no bench/results rows). None without --profile."""
    if not getattr(args, "profile", False):
        return None
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    profiler = profile(activities=activities, schedule=schedule(wait=max(0, args.skip - 1), warmup=1, active=6))
    profiler.start()
    return profiler


def print_profile(profiler) -> None:
    """The profiled steps' kernels and operators by self time, into the run's log."""
    if profiler is None:
        return
    import torch

    profiler.stop()
    key = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    print(f"---- profile: 6 steps after warm-up, by {key} ----", flush=True)
    print(profiler.key_averages().table(sort_by=key, row_limit=45), flush=True)


def clock(steps: list, counted: dict, torch, profiler=None):
    """A callback that appends (step, tokens so far, training seconds so far) at the end of every step."""
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.started = time.monotonic()

        def on_step_end(self, a, state, control, **kw):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            seconds = (steps[-1][2] if steps else 0.0) + time.monotonic() - self.started
            steps.append((state.global_step, counted["tokens"], seconds))
            if profiler is not None:
                profiler.step()
    return Clock()
