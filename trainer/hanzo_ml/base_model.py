"""`build-base`: the small base model every local pipeline fine-tunes, made without the Hub.

    python -m hanzo_ml build-base --out DIR [--seed 0]

Steps, all seeded and deterministic on CPU:
  1. a byte-level BPE tokenizer trained on examples/corpus, with the chat-template special tokens;
  2. a Llama model (hidden 256, intermediate 768: multiples of 256 so GGUF k-quants apply to every matrix);
  3. a short fp32 pre-training on the same corpus, so the model knows the store's language before LoRA;
  4. save_pretrained (safetensors) + tokenizer files + base-model.json (sha256 of every file, the recipe).
The directory is built under a temporary name and renamed into place, so a half-built model never exists.
The bootstrap caches the result keyed by the hash of this file and of the corpus.
"""
from __future__ import annotations

import logging
import math
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hanzo_ml.files import atomic_write_json, file_entries, replace_dir, sha256_file

log = logging.getLogger(__name__)

MODEL_NAME = "hanzo-tiny-llama"

PAD, BOS, END = "<|pad|>", "<|bos|>", "<|end|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
# Ids 0, 1, 2 are pad, bos and end: <|end|> closes a chat turn and a pre-training document alike, so the model
# learns to emit it before it ever sees the chat format, and it is the eos that generation stops at.
SPECIAL_TOKENS = (PAD, BOS, END, *ROLE_TOKENS)

# One turn is `<|role|>\n` + content + `<|end|>`. No text between turns, so every turn boundary is a special
# token and the tokens of a rendered prefix are a prefix of the tokens of the whole conversation.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)


@dataclass(frozen=True)
class ModelShape:
    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    head_dim: int = 64
    max_position_embeddings: int = 1024
    rope_theta: float = 10000.0


@dataclass(frozen=True)
class PretrainRecipe:
    steps: int = 300          # ~2 min on 2 idle CPU threads (budget: 5 min); the loss plateaus by ~200
    batch_size: int = 16
    seq_length: int = 128
    learning_rate: float = 2e-3  # small model, short run: high peak LR, cosine decay to 10%
    warmup_steps: int = 30
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0


@dataclass(frozen=True)
class BaseModelRecipe:
    vocab_size: int = 3072    # a target: BPE stops earlier when the corpus has no more frequent pairs
    shape: ModelShape = field(default_factory=ModelShape)
    pretrain: PretrainRecipe = field(default_factory=PretrainRecipe)
    threads: int = 2


def default_corpus_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "examples" / "corpus"


def corpus_files(corpus_dir: Path) -> list[Path]:
    files = sorted(corpus_dir.glob("*.txt"))
    if not files:
        raise FileNotFoundError(f"{corpus_dir}: no *.txt corpus files (run `python -m hanzo_ml make-demo-data`)")
    return files


def corpus_documents(files: list[Path]) -> list[str]:
    """Documents are blank-line separated blocks, in file order then position order."""
    docs = []
    for path in files:
        docs.extend(block.strip() for block in path.read_text(encoding="utf-8").split("\n\n") if block.strip())
    return docs


def train_tokenizer(documents: list[str], vocab_size: int):
    """Byte-level BPE (any text encodes, nothing is unknown) wrapped as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=1, special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tokenizer.train_from_iterator(documents, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=BOS, eos_token=END, pad_token=PAD,
        additional_special_tokens=list(ROLE_TOKENS), chat_template=CHAT_TEMPLATE,
    )


def llama_config(shape: ModelShape, tokenizer):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=shape.hidden_size, intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers, num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_attention_heads, head_dim=shape.head_dim,
        max_position_embeddings=shape.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": shape.rope_theta},
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False,
    )


def token_stream(documents: list[str], tokenizer, seed: int):
    """All documents as `<|bos|> text <|end|>`, in a seeded order, concatenated: (N,) int64."""
    import torch

    order = torch.randperm(len(documents), generator=torch.Generator().manual_seed(seed)).tolist()
    ids: list[int] = []
    for i in order:
        ids += [tokenizer.bos_token_id, *tokenizer.encode(documents[i], add_special_tokens=False),
                tokenizer.eos_token_id]
    return torch.tensor(ids, dtype=torch.long)


def cosine_with_warmup(step: int, recipe: PretrainRecipe) -> float:
    if step < recipe.warmup_steps:
        return (step + 1) / recipe.warmup_steps
    progress = (step - recipe.warmup_steps) / max(1, recipe.steps - recipe.warmup_steps)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


def pretrain(model, stream, recipe: PretrainRecipe, seed: int) -> dict:
    """Next-token prediction on random windows of the token stream; returns a summary of the run."""
    import torch

    generator = torch.Generator().manual_seed(seed + 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.learning_rate, weight_decay=recipe.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: cosine_with_warmup(s, recipe))
    num_windows = len(stream) - recipe.seq_length
    model.train()
    started, loss = time.monotonic(), float("nan")
    for step in range(recipe.steps):
        starts = torch.randint(0, num_windows, (recipe.batch_size,), generator=generator)       # (B,)
        offsets = torch.arange(recipe.seq_length)                                                # (T,)
        batch = stream[starts[:, None] + offsets[None, :]]                                       # (B, T)
        loss = model(input_ids=batch, labels=batch).loss  # the model shifts labels by one itself
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 50 == 0 or step == recipe.steps - 1:
            log.info("pretrain step %d/%d loss %.4f lr %.2e", step + 1, recipe.steps, loss.item(),
                     scheduler.get_last_lr()[0])
    model.eval()
    return {"final_loss": round(loss.item(), 6), "tokens_seen": recipe.steps * recipe.batch_size * recipe.seq_length,
            "seconds": round(time.monotonic() - started, 1)}


def build_base(out_dir: Path, seed: int = 0, corpus_dir: Path | None = None,
               recipe: BaseModelRecipe = BaseModelRecipe()) -> dict:
    """Build the base model into out_dir (replacing it atomically) and return its base-model.json."""
    import torch
    import transformers
    import tokenizers
    from transformers import LlamaForCausalLM

    started = time.monotonic()
    torch.set_num_threads(recipe.threads)
    torch.use_deterministic_algorithms(True)
    files = corpus_files(corpus_dir or default_corpus_dir())
    documents = corpus_documents(files)
    tokenizer = train_tokenizer(documents, recipe.vocab_size)
    log.info("tokenizer: %d tokens from %d documents", len(tokenizer), len(documents))

    torch.manual_seed(seed)
    model = LlamaForCausalLM(llama_config(recipe.shape, tokenizer))
    stream = token_stream(documents, tokenizer, seed)
    log.info("pre-training %.1fM parameters on %d corpus tokens", model.num_parameters() / 1e6, len(stream))
    pretraining = pretrain(model, stream, recipe.pretrain, seed)

    out_dir = out_dir.resolve()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.with_name(f".tmp-{out_dir.name}-{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    manifest = {
        "name": MODEL_NAME,
        "seed": seed,
        "recipe": asdict(recipe),
        "vocab_size": len(tokenizer),
        "num_parameters": model.num_parameters(),
        "corpus": [{"path": p.name, "size_bytes": p.stat().st_size, "sha256": sha256_file(p)} for p in files],
        "corpus_tokens": len(stream),
        "pretraining": pretraining,
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "tokenizers": tokenizers.__version__},
        "build_seconds": round(time.monotonic() - started, 1),
        "files": file_entries(tmp),
    }
    atomic_write_json(tmp / "base-model.json", manifest)
    replace_dir(tmp, out_dir)
    log.info("base model written to %s in %.0f s", out_dir, manifest["build_seconds"])
    return manifest
