"""Small pieces the recipes are composed of: devices, adapters, weights on disk, data, and the chat objective.

A recipe (full.py, lora.py, qlora.py, adalora.py, dpo.py, orpo.py) picks one of each; the training loop in
hanzo_ml/lora.py drives every recipe the same way (order, accumulation, checkpoints, resume, SIGTERM, metrics).
"""
from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Iterator

import torch

from hanzo_ml.chat import encode_dataset, load_tokenizer, read_chat_jsonl
from hanzo_ml.errors import InputError
from hanzo_ml.files import replace_dir
from hanzo_ml.kernels import summed_nll, with_loss_positions
from hanzo_ml.modeling import collate, target_token_count
from hanzo_ml.spec import require_existing

log = logging.getLogger(__name__)


# ---- devices -----------------------------------------------------------------------------------

def resolve_device(spec) -> torch.device:
    """hardware.device: auto picks cuda when present. Asking for cuda on a machine without it is bad input."""
    wanted = spec.hardware.device
    if wanted == "cuda" and not torch.cuda.is_available():
        raise InputError(f"hardware.device: method {spec.method} was asked to run on cuda; this machine has no "
                         "CUDA device (use device cpu or auto)")
    if wanted == "cuda" or (wanted == "auto" and torch.cuda.is_available()):
        count = torch.cuda.device_count()
        if spec.hardware.gpus_per_node > count:
            raise InputError(f"hardware.gpus_per_node: {spec.hardware.gpus_per_node} GPUs asked for; this machine "
                             f"has {count}")
        return torch.device("cuda", 0)
    return torch.device("cpu")


def resolve_precision(spec, device: torch.device) -> torch.dtype | None:
    """hardware.precision: the dtype the forward pass autocasts to, or None for plain fp32."""
    wanted = getattr(spec.hardware, "precision", "auto")
    cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    if wanted == "bf16" and device.type == "cuda" and not cuda_bf16:
        raise InputError(f"hardware.precision: bf16 was asked for; {torch.cuda.get_device_name(device)} does not "
                         "support bfloat16 (use fp32 or auto)")
    return torch.bfloat16 if wanted == "bf16" or (wanted == "auto" and cuda_bf16) else None


def frozen_base_dtype(spec, device: torch.device) -> torch.dtype:
    """Adapter methods hold their frozen base in the forward pass's precision (bf16 on GPUs that have it): half
    the memory of float32, and what hanzo_ml/memory.py counts. peft creates the adapters in float32 regardless
    (autocast_adapter_dtype), so what is trained and checkpointed keeps full precision."""
    return resolve_precision(spec, device) or torch.float32


def autocast_forward(model, dtype: torch.dtype | None) -> None:
    """Mixed precision the way Accelerate does it: the model's forward runs under autocast (matmuls and
    attention in bf16, reductions and the loss in fp32) while what is trained, its gradients and the optimizer
    state stay fp32 (full fine-tuning on bf16 weights keeps float32 masters: hanzo_ml.master_weights), so
    checkpoints and resume are unchanged. Evaluation goes through the same forward."""
    if dtype is not None:
        model.forward = torch.autocast(model_device(model).type, dtype=dtype)(model.forward)
        model.autocast_dtype = dtype  # for code that calls the model's parts directly (hanzo_ml.kernels)
        keep_adapter_inputs(model)


def keep_adapter_inputs(model) -> int:
    """Under autocast, peft's adapter layers take their input as it comes instead of casting it to the adapter's
    float32 first. Autocast casts every matmul's operands to its dtype whatever they were, so the float32 copy
    changes no value (bf16 -> float32 -> bf16 is exact, forward and backward) while costing, for each adapted
    projection, a float32 copy of its whole input and a cast back, forward and again backward: 12 bytes moved per
    input value each way, where the low-rank matmul itself reads 2. (peft's bitsandbytes layers, QLoRA's, skip the
    copy under autocast on CUDA already; on a CPU they make it too.) Returns the layers changed."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    for layer in layers:
        layer.cast_input_dtype_enabled = False  # what peft.helpers.disable_input_dtype_casting sets, for good
    return len(layers)


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def batch_tokens(batch: dict[str, torch.Tensor]) -> int:
    """Non-padding tokens the model reads for a batch: its (B, T) attention masks (ORPO keeps chosen and rejected
    rows apart, the prompt rows are part of both)."""
    keys = [k for k in ("attention_mask", "chosen_attention_mask", "rejected_attention_mask") if k in batch]
    return sum(int(batch[k].sum()) for k in keys)


def model_device(model) -> torch.device:
    return next(model.parameters()).device


# ---- adapters ----------------------------------------------------------------------------------

def lora_config(hp):
    from peft import LoraConfig

    return LoraConfig(r=hp.lora_rank, lora_alpha=hp.lora_alpha, lora_dropout=hp.lora_dropout,
                      target_modules=list(hp.target_modules), bias="none", task_type="CAUSAL_LM")


def enable_checkpointing(model, hp) -> None:
    """hyperparameters.gradient_checkpointing: recompute each layer in the backward pass instead of storing its
    activations. With a frozen base the embeddings' output must require grad, or nothing flows into the layers."""
    if getattr(hp, "gradient_checkpointing", False):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()


def attach_adapter(base, config, spec_path: Path, hp=None):
    """peft freezes the base and adds the adapter (LoRA: A seeded-random, B zero, so it starts at the base)."""
    from peft import get_peft_model

    enable_checkpointing(base, hp)
    try:
        model = get_peft_model(base, config)
    except ValueError as e:  # a module name the architecture does not have: only the model can tell
        raise InputError(f"{spec_path}: hyperparameters.target_modules: {e}".replace("\n", " ")) from e
    model.train()
    return model


# ---- weights on disk: what a checkpoint and the final output hold --------------------------------

class AdapterWeights:
    """Adapter methods: only the adapter is trained, saved and restored; the base is rebuilt from its files."""
    directory = "adapter"

    def save(self, model, checkpoint: Path, state_dict: dict | None = None) -> None:
        """state_dict: the trainable weights gathered from an fsdp run; peft picks the adapter's out of it."""
        # adapter_model.safetensors + adapter_config.json
        model.save_pretrained(checkpoint / self.directory, state_dict=state_dict)

    def load(self, model, checkpoint: Path) -> None:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        loaded = set_peft_model_state_dict(model, load_file(checkpoint / self.directory / "adapter_model.safetensors"))
        if getattr(loaded, "unexpected_keys", None):
            raise RuntimeError(f"{checkpoint}: adapter weights do not fit this adapter configuration: "
                               f"{loaded.unexpected_keys[:3]}")

    def save_final(self, model, output_dir: Path, base_model_path: Path, state_dict: dict | None = None) -> dict:
        final = save_atomically(output_dir / "adapter", lambda d: model.save_pretrained(d, state_dict=state_dict))
        return {"adapter_path": str(final), "model_path": None}


class FullWeights:
    """Full fine-tuning: every weight is trained, so every weight is checkpointed (safetensors, ties kept)."""
    directory = "model"

    def save(self, model, checkpoint: Path, state_dict: dict | None = None) -> None:
        """state_dict: every weight gathered from an fsdp run; otherwise the model's own."""
        from safetensors.torch import save_file, save_model

        (checkpoint / self.directory).mkdir(parents=True, exist_ok=True)
        path = str(checkpoint / self.directory / "model.safetensors")
        if state_dict is None:
            save_model(model, path)
        else:
            save_file(without_tied_copies(model, state_dict), path, metadata={"format": "pt"})

    def load(self, model, checkpoint: Path) -> None:
        from safetensors.torch import load_model

        load_model(model, str(checkpoint / self.directory / "model.safetensors"), strict=True)

    def save_final(self, model, output_dir: Path, base_model_path: Path, state_dict: dict | None = None) -> dict:
        def write(directory: Path) -> None:
            model.save_pretrained(directory, state_dict=state_dict)
            for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                         "special_tokens_map.json"):
                if (base_model_path / name).is_file():
                    shutil.copy2(base_model_path / name, directory / name)

        return {"adapter_path": None, "model_path": str(save_atomically(output_dir / "model", write))}


def without_tied_copies(model, state_dict: dict) -> dict:
    """A weight tied under two names (embeddings and head) is stored once, under its first name, as
    safetensors' save_model does; load_model fills the other name from it."""
    first_name: dict[int, str] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        first_name.setdefault(id(parameter), name)
    tied = {name for name, p in model.named_parameters(remove_duplicate=False) if first_name[id(p)] != name}
    return {name: tensor.contiguous() for name, tensor in state_dict.items() if name not in tied}


def save_atomically(final: Path, write: Callable[[Path], None]) -> Path:
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    write(tmp)
    replace_dir(tmp, final)
    return final


# ---- data --------------------------------------------------------------------------------------

@dataclass
class Datasets:
    train: list            # examples (or packed rows) the sampler draws from
    validation: list       # empty when the spec has no validation_path
    pad_id: int
    collate: Callable[[list], dict]  # a micro-batch of train/validation items -> tensors
    tokenizer: object = None


def read_inputs(spec, spec_path: Path):
    """Every input path exists, and the tokenizer (with the chosen chat template) loads."""
    require_existing(spec_path, "base_model_path", spec.base_model_path, kind="dir")
    require_existing(spec_path, "train_path", spec.train_path)
    require_existing(spec_path, "validation_path", spec.validation_path)
    try:
        tokenizer = load_tokenizer(Path(spec.base_model_path), spec.data.chat_template)
    except InputError as e:
        raise InputError(f"{spec_path}: {e}") from e
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return tokenizer, pad_id


def load_chat_datasets(spec, spec_path: Path) -> Datasets:
    """Chat records, prompt-masked (data.mask_prompt) and optionally packed (data.packing)."""
    from hanzo_ml.packing import collate_packed, pack

    hp, options = spec.hyperparameters, spec.data
    tokenizer, pad_id = read_inputs(spec, spec_path)

    def encode(path: str | None, split: str) -> list:
        if not path:
            return []
        if getattr(options, "tokenized_dir", None):
            return read_prepared(spec, spec_path, path, split)
        conversations = read_chat_jsonl(Path(path), training_method=spec.method)
        return encode_dataset(tokenizer, conversations, hp.max_seq_length, path, options.mask_prompt)

    train, validation = encode(spec.train_path, "train"), encode(spec.validation_path, "validation")
    if options.packing:
        packed = pack(train, hp.max_seq_length)
        log.info("packing: %d examples into %d rows of <= %d tokens", len(train), len(packed), hp.max_seq_length)
        return Datasets(packed, pack(validation, hp.max_seq_length), pad_id,
                        lambda rows: collate_packed(rows, pad_id), tokenizer)
    return Datasets(train, validation, pad_id, lambda examples: collate(examples, pad_id), tokenizer)


def read_prepared(spec, spec_path: Path, path: str, split: str) -> list:
    """data.tokenized_dir: the rows prepare-dataset tokenized with this trainer's own code, instead of
    tokenizing again; refused unless they were made exactly as this job would make them."""
    from hanzo_ml.dataprep.tokenized import read_tokenized
    from hanzo_ml.files import sha256_file

    expected = {"tokenizer_sha256": sha256_file(Path(spec.base_model_path) / "tokenizer.json"),
                "max_length": str(spec.hyperparameters.max_seq_length), "chat_template": spec.data.chat_template,
                "mask_prompt": "true" if spec.data.mask_prompt else "false"}
    examples = read_tokenized(Path(spec.data.tokenized_dir), split, Path(path), expected,
                              f"{spec_path}: data.tokenized_dir")
    if examples and all(e.num_target_tokens == 0 for e in examples):
        raise InputError(f"{path}: no record keeps an assistant token within "
                         f"max_seq_length={spec.hyperparameters.max_seq_length}")
    return examples


PREFERENCE_DEFAULTS = SimpleNamespace(beta=0.1, loss_type="sigmoid")


def preference_settings(spec):
    """The spec's `preference` section (dpo, orpo), or its defaults when the spec has none."""
    return spec.preference if getattr(spec, "preference", None) is not None else PREFERENCE_DEFAULTS


def load_preference_datasets(spec, spec_path: Path, collate_pairs: Callable[[list, int], dict]) -> Datasets:
    from hanzo_ml.preference import encode_preference_dataset, read_preference_jsonl

    tokenizer, pad_id = read_inputs(spec, spec_path)
    max_len = spec.hyperparameters.max_seq_length

    def encode(path: str | None) -> list:
        if not path:
            return []
        return encode_preference_dataset(tokenizer, read_preference_jsonl(Path(path)), max_len, path)

    if spec.data.packing:
        raise InputError(f"{spec_path}: data.packing: method {spec.method} compares whole answers pair by pair; "
                         "packing applies to chat methods only")
    return Datasets(encode(spec.train_path), encode(spec.validation_path), pad_id,
                    lambda pairs: collate_pairs(pairs, pad_id), tokenizer)


# ---- the chat objective: next-token NLL on labelled tokens -----------------------------------------

@torch.no_grad()
def mean_pair_loss(model, pairs: list, batch_size: int, collate_pairs: Callable[[list], dict],
                   loss_of: Callable[[dict], torch.Tensor]) -> float:
    """A preference loss averaged over held-out pairs in eval mode; the model's mode is left as it was."""
    was_training = model.training
    model.eval()
    total, device = 0.0, model_device(model)
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        total += loss_of(to_device(collate_pairs(chunk), device)).item() * len(chunk)
    model.train(was_training)
    return total / len(pairs)


class ChatObjective:
    """Token-mean NLL over the whole optimizer step: each micro-batch's summed NLL is divided by the target tokens
    of the step, so the accumulated gradient is exactly that of the step's token mean however padding falls."""

    def __init__(self, collate_fn: Callable[[list], dict]):
        self.collate = collate_fn

    def micro_batch_losses(self, model, micro_batches: list[dict]) -> Iterator[torch.Tensor]:
        num_targets = max(1, sum(target_token_count(b) for b in micro_batches))
        device = model_device(model)
        for batch in micro_batches:
            yield summed_nll(model, to_device(with_loss_positions(batch), device)) / num_targets  # scalar

    def step_metrics(self) -> dict[str, float]:
        return {}

    @torch.no_grad()
    def evaluate(self, model, examples: list, batch_size: int) -> float:
        was_training = model.training
        model.eval()
        total, count, device = 0.0, 0, model_device(model)
        for start in range(0, len(examples), batch_size):
            batch = self.collate(examples[start:start + batch_size])
            total += summed_nll(model, to_device(with_loss_positions(batch), device)).item()
            count += target_token_count(batch)
        model.train(was_training)
        return total / count if count else float("nan")


# ---- preference objectives: trl's trainers used as loss modules -----------------------------------

class TrlLossModule:
    """trl's DPO and ORPO losses live inside its trainer classes. We construct the trainer once, as the object
    that holds the loss settings (beta, loss type) and patches the model the way the loss expects, and call its
    loss on the batches our loop makes; its own training loop, data loader and logging are never run. trl
    requires a dataset at construction: it gets the first pair as text, and its tokenization of it goes unused."""

    def __init__(self):
        import tempfile

        from datasets.utils.logging import disable_progress_bar

        disable_progress_bar()  # trl maps its one-record dataset; no progress bars in the job's log
        self._scratch = tempfile.TemporaryDirectory(prefix="hanzo-ml-trl-")  # trl's output_dir, never written to
        self.collected: dict[str, list[float]] = {}

    @property
    def scratch_dir(self) -> str:
        return self._scratch.name

    @staticmethod
    def seed_dataset(data: Datasets):
        from datasets import Dataset

        first, decode = data.train[0], data.tokenizer.decode
        return Dataset.from_list([{"prompt": decode(first.prompt_ids), "chosen": decode(first.chosen_ids),
                                   "rejected": decode(first.rejected_ids)}])

    def collect(self, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.collected.setdefault(key, []).append(float(value))

    def step_metrics(self) -> dict[str, float]:
        """Mean of each trl metric over the step's micro-batches, under train/ (rewards/margins, ...)."""
        means = {f"train/{k}": sum(v) / len(v) for k, v in self.collected.items() if v}
        self.collected = {}
        return means
