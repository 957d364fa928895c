"""filter: keep records whose rendered conversation has between min_tokens and max_tokens tokens (the job's
tokenizer and chat template, exactly as count-tokens counts) and whose text is in one of `languages`.

Language detection is lingua's, its models shipped in the wheel. A detector that knows only the requested
languages calls every text one of them (built from English and French, it calls a German sentence English with
confidence 1.0), so it also knows a fixed set of contrast languages to tell them apart from (CONTRAST_LANGUAGES,
listed in the stage's details as detector_languages): the Latin-script languages lingua most often confuses with
one another (English, Spanish, French, German, Portuguese, Italian, Dutch) and the most common ones of other scripts
(Russian, Chinese, Japanese, Arabic, Hindi). A text in a language outside the set is called the set's closest
member, so with a low confidence it is removed, with a high one it may pass. Low-accuracy mode (trigrams only) is
used: 68 us of CPU per sentence against 149 us in high-accuracy mode. Only the text's first LANGUAGE_PREFIX_CHARS
characters are read (cut at a space): lingua's time grows with the text. Measured on 3,000 records of the data
bench (about 830 characters each; 60% common English words, the rest made-up ones, so a hard case), one core: the
whole text 580 us a record, the first 512 characters 485 us (99.6% of the decisions the whole text gives), the first
256 characters 255 us (96.5%: the misses are English records whose opening alone falls below
min_language_confidence), 160 characters 167 us (91%). 256 is the choice; the cost is that a conversation is judged
by its opening (a short opening that mixes languages or names can fall below the confidence). The cost grows with
the Latin-script languages known (about 30 us each on that prefix; the other scripts' are ruled out by their
letters almost for free): Turkish and Polish were dropped from the set for about 17% of the detector's time, and
the detector without them agrees with the one with them on 99.5% of the bench's records (the others: made-up
words that looked Turkish or Polish enough to be removed and now pass as English). Removed counts per reason go
to details.

With a tokenize operation after it, the worker that counts a record's tokens makes its tokenized rows in the same
batch call (tokenized.labelled_examples); the count is their length.
"""
from __future__ import annotations

from collections import Counter
from typing import Iterator

from hanzo_ml.dataprep.ops import Stage, chunked
from hanzo_ml.dataprep.parallel import ordered_map
from hanzo_ml.dataprep.records import Record

CHUNK = 256
LANGUAGE_PREFIX_CHARS = 256
CONTRAST_LANGUAGES = ("en", "es", "fr", "de", "pt", "it", "nl", "ru", "zh", "ja", "ar", "hi")


def conversation_lengths(tokenizer, conversations: list[list[dict]]) -> list[int]:
    """len(chat.encode_conversation(...)) for each, the renders tokenized in one batch call."""
    from hanzo_ml.chat import render

    texts = [render(tokenizer, messages) for messages in conversations]
    if not texts:
        return []
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def detector_languages(codes: list[str]) -> list[str]:
    """The languages the detector knows: the requested ones, then the contrast set."""
    return list(dict.fromkeys([*codes, *CONTRAST_LANGUAGES]))


def language_detector(codes: list[str]):
    from lingua import IsoCode639_1, Language, LanguageDetectorBuilder

    def language(code: str):
        return Language.from_iso_code_639_1(getattr(IsoCode639_1, code.upper()))

    known = detector_languages(codes)
    return LanguageDetectorBuilder.from_languages(*(language(c) for c in known)).with_low_accuracy_mode().build(), \
        {language(c) for c in codes}


def unknown_languages(codes: list[str]) -> list[str]:
    from lingua import IsoCode639_1

    return [c for c in codes if not hasattr(IsoCode639_1, c.upper())]


class Filter(Stage):
    op = "filter"

    def __init__(self, params, context):
        super().__init__(params)
        self.context = context
        languages = params.get("languages")
        if languages:
            unknown = unknown_languages(languages)
            if unknown:
                from hanzo_ml.dataprep.issues import single_issue

                raise single_issue("operations", f"no language detector for {unknown[0]!r} (expected an "
                                   "ISO 639-1 code lingua knows)", field="filter.languages")
            self.details["detector_languages"] = detector_languages(languages)

    def worker(self):
        tokenizer = self.context.tokenizer() if self.by_tokens else None
        labelled = self.context.labelled
        params = self.params
        detector, wanted = language_detector(params["languages"]) if params.get("languages") else (None, None)
        low, high = params.get("min_tokens"), params.get("max_tokens")
        confidence = params.get("min_language_confidence", 0.5)

        def decide(chunk: list[Record]) -> tuple[list[str | None], list[int | None], list[tuple | None]]:
            reasons: list[str | None] = [None] * len(chunk)
            lengths: list[int | None] = [None] * len(chunk)
            examples: list[tuple | None] = [None] * len(chunk)
            if tokenizer is not None and labelled:
                from hanzo_ml.dataprep.tokenized import labelled_examples

                examples = labelled_examples(tokenizer, [r.conversation() for r in chunk])
                lengths = [len(ids) for ids, _ in examples]
            elif tokenizer is not None:
                lengths = conversation_lengths(tokenizer, [r.conversation() for r in chunk])
            if tokenizer is not None:
                for i, n in enumerate(lengths):
                    if low is not None and n < low:
                        reasons[i] = "too_few_tokens"
                    elif high is not None and n > high:
                        reasons[i] = "too_many_tokens"
            if detector is not None:
                for i, record in enumerate(chunk):
                    if reasons[i] is None and not in_languages(detector, wanted, record.text(), confidence):
                        reasons[i] = "language"
            return reasons, lengths, [e if r is None else None for e, r in zip(examples, reasons)]

        return decide

    @property
    def by_tokens(self) -> bool:
        return self.params.get("min_tokens") is not None or self.params.get("max_tokens") is not None

    def process(self, records: Iterator[Record]) -> Iterator[Record]:
        removed: Counter = Counter()
        for chunk, (reasons, lengths, examples) in ordered_map(self.worker, chunked(records, CHUNK),
                                                               self.context.threads):
            for record, reason, tokens, example in zip(chunk, reasons, lengths, examples):
                if reason is None:
                    record.tokens = tokens  # counted as the split files' counts are: not counted again
                    record.encoded = example
                    yield record
                else:
                    removed[reason] += 1
        self.removed = sum(removed.values())
        self.details["removed"] = {r: removed.get(r, 0) for r in ("too_few_tokens", "too_many_tokens", "language")}


def language_prefix(text: str) -> str:
    """The first LANGUAGE_PREFIX_CHARS characters, cut back to the last space so no word is split."""
    if len(text) <= LANGUAGE_PREFIX_CHARS:
        return text
    cut = text.rfind(" ", 0, LANGUAGE_PREFIX_CHARS + 1)
    return text[:cut] if cut > LANGUAGE_PREFIX_CHARS // 2 else text[:LANGUAGE_PREFIX_CHARS]


def in_languages(detector, wanted, text: str, confidence: float) -> bool:
    values = detector.compute_language_confidence_values(language_prefix(text))
    return bool(values) and values[0].language in wanted and values[0].value >= confidence
