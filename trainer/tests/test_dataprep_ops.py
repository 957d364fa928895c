"""prepare-dataset operations, each a streaming stage: what it keeps, removes and adds, and what it reports."""
from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from hanzo_ml.chat import encode_conversation, load_tokenizer
from hanzo_ml.dataprep.issues import IssueLog
from hanzo_ml.dataprep.ops import Stage, build_stage
from hanzo_ml.dataprep.records import Record, canonical_json
from hanzo_ml.dataprep.run import Context
from helpers import demo_records, write_jsonl

GERMAN = ("Wie kann ich mein Passwort zurücksetzen? Klicken Sie auf den Link in der E-Mail, die wir Ihnen "
          "geschickt haben, und wählen Sie dann ein neues Passwort.")
ENGLISH = ("How do I reset my password? Click the link in the email we sent you, then choose a new password "
           "and sign in again.")


def context(tmp_path: Path, tokenizer_dir: Path | None = None, parents: list[Path] = (), threads: int = 1):
    spec = SimpleNamespace(work_dir=str(tmp_path), memory_budget_mb=256, threads=threads,
                           tokenizer_path=str(tokenizer_dir) if tokenizer_dir else None,
                           parents=[str(p) for p in parents])
    return Context(spec, IssueLog(20))


def chat(user: str, answer: str, **extra) -> Record:
    return Record({"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]},
                  "in.jsonl", 1, "in.jsonl", extra=extra)


def demo(count: int) -> list[Record]:
    return [Record({"messages": r["messages"]}, "in.jsonl", i + 1, "in.jsonl") for i, r in enumerate(demo_records(count))]


def run_op(op: dict, records: list[Record], ctx) -> tuple[list[Record], dict]:
    stage = build_stage(op, ctx)
    try:
        out = list(stage.run(iter(records)))
    finally:
        stage.close()
    return out, stage.report()


# ---- dedup_exact -----------------------------------------------------------------------------------

def test_dedup_exact_keeps_the_first_of_equal_records_and_drops_those_in_parents(tmp_path):
    records = [chat("a", "1"), chat("b", "2"), chat("a", "1", id=7), chat("c", "3"), chat("b", "2")]
    parent = write_jsonl(tmp_path / "parent.jsonl", [chat("c", "3").value])

    alone, report = run_op({"op": "dedup_exact", "against_parents": False}, records, context(tmp_path))
    against, report_parents = run_op({"op": "dedup_exact", "against_parents": True}, records,
                                     context(tmp_path, parents=[parent]))

    assert [r.value["messages"][0]["content"] for r in alone] == ["a", "b", "c"]
    assert alone[0].extra == {}  # the first of the group is the one kept
    assert report["records_in"] == 5 and report["records_out"] == 3 and report["removed"] == 2
    assert [r.value["messages"][0]["content"] for r in against] == ["a", "b"]
    assert report_parents["details"] == {"parent_records": 1, "duplicates": 3}


def test_dedup_exact_keeps_its_keys_on_disk_and_cleans_up(tmp_path):
    stage = build_stage({"op": "dedup_exact", "against_parents": False}, context(tmp_path))
    output = stage.run(iter(demo(50)))
    next(output)
    on_disk = list(tmp_path.glob("dedup-exact-*/keys.sqlite"))
    list(output)
    stage.close()

    assert len(on_disk) == 1
    assert list(tmp_path.glob("dedup-exact-*")) == []


# ---- filter -----------------------------------------------------------------------------------------

def test_filter_by_tokens_counts_the_rendered_conversation_as_count_tokens_does(tmp_path, tiny_base_dir):
    records = demo(40)
    tokenizer = load_tokenizer(tiny_base_dir)
    lengths = [len(encode_conversation(tokenizer, r.value["messages"])) for r in records]
    low, high = sorted(lengths)[10], sorted(lengths)[30]

    kept, report = run_op({"op": "filter", "min_tokens": low, "max_tokens": high}, records,
                          context(tmp_path, tiny_base_dir, threads=2))

    assert [canonical_json(r.value) for r in kept] == [
        canonical_json(r.value) for r, n in zip(records, lengths) if low <= n <= high]
    removed = report["details"]["removed"]
    assert removed["too_few_tokens"] == sum(n < low for n in lengths)
    assert removed["too_many_tokens"] == sum(n > high for n in lengths)
    assert report["removed"] == len(records) - len(kept)


def test_filter_by_language_keeps_only_the_requested_languages(tmp_path):
    records = [chat(ENGLISH, ENGLISH), chat(GERMAN, GERMAN), chat(ENGLISH, "Yes, exactly that way it works."),
               chat(GERMAN, "Ja, genau so funktioniert es.")]

    kept, report = run_op({"op": "filter", "languages": ["de"], "min_language_confidence": 0.5}, records,
                          context(tmp_path))
    both, _ = run_op({"op": "filter", "languages": ["de", "en"], "min_language_confidence": 0.5}, records,
                     context(tmp_path))

    assert [r.value["messages"][0]["content"] for r in kept] == [GERMAN, GERMAN]
    assert report["details"]["removed"] == {"too_few_tokens": 0, "too_many_tokens": 0, "language": 2}
    assert len(both) == 4


def test_the_filter_report_names_its_detector_and_a_language_it_knows_elsewhere_is_not_taken_for_the_requested_one(
        tmp_path):
    records = [chat(ENGLISH, ENGLISH), chat("Hola, ¿cómo estás hoy? Muy bien, gracias.", "Perfecto, hasta luego.")]

    kept, report = run_op({"op": "filter", "languages": ["sv"]}, records, context(tmp_path))

    assert report["details"]["detector"] == {"model": "lid.176.ftz", "languages": 176}
    assert kept == []  # English and Spanish do not pass as Swedish


# One sentence of everyday chat per language, each read by the filter as its own language and no other.
LABELLED = {
    "en": "Could you tell me when the next train to the airport leaves? I need to be there by nine.",
    "de": "Kannst du mir sagen, wann der nächste Zug zum Flughafen fährt? Ich muss um neun dort sein.",
    "fr": "Peux-tu me dire quand part le prochain train pour l'aéroport ? Je dois y être à neuf heures.",
    "es": "¿Puedes decirme cuándo sale el próximo tren al aeropuerto? Tengo que estar allí a las nueve.",
    "it": "Puoi dirmi quando parte il prossimo treno per l'aeroporto? Devo essere lì per le nove.",
    "pt": "Você pode me dizer quando sai o próximo trem para o aeroporto? Preciso estar lá às nove.",
    "nl": "Kun je me vertellen wanneer de volgende trein naar het vliegveld vertrekt? Ik moet er om negen uur zijn.",
    "sv": "Kan du berätta när nästa tåg till flygplatsen går? Jag måste vara där klockan nio.",
    "pl": "Czy możesz mi powiedzieć, kiedy odjeżdża następny pociąg na lotnisko? Muszę tam być o dziewiątej.",
    "tr": "Havaalanına giden bir sonraki trenin ne zaman kalktığını söyler misin? Dokuzda orada olmam gerekiyor.",
    "ru": "Не подскажешь, когда отправляется следующий поезд в аэропорт? Мне нужно быть там к девяти.",
    "zh": "你能告诉我下一班去机场的火车什么时候出发吗？我需要九点前到那里。",
    "ja": "空港行きの次の電車はいつ出発するか教えてもらえますか？九時までに着かなければなりません。",
    "ar": "هل يمكنك أن تخبرني متى يغادر القطار التالي إلى المطار؟ يجب أن أكون هناك بحلول التاسعة.",
}


@pytest.mark.parametrize("language", sorted(LABELLED))
def test_the_language_filter_keeps_a_labelled_sentence_for_its_own_language_only(tmp_path, language):
    records = [chat(text, text) for text in LABELLED.values()]

    kept, report = run_op({"op": "filter", "languages": [language]}, records, context(tmp_path))

    assert [r.value["messages"][0]["content"] for r in kept] == [LABELLED[language]]
    assert report["details"]["removed"]["language"] == len(LABELLED) - 1


def test_an_unknown_language_code_is_refused_at_start(tmp_path):
    from hanzo_ml.errors import InputError

    with pytest.raises(InputError, match="no language detector for 'xx'"):
        build_stage({"op": "filter", "languages": ["xx"]}, context(tmp_path))


# ---- augment ------------------------------------------------------------------------------------------

def test_shuffle_is_a_deterministic_permutation(tmp_path):
    records = demo(60)
    lines = [canonical_json(r.value) for r in records]

    first, _ = run_op({"op": "augment", "shuffle_seed": 5}, records, context(tmp_path))
    again, _ = run_op({"op": "augment", "shuffle_seed": 5}, records, context(tmp_path))
    other, _ = run_op({"op": "augment", "shuffle_seed": 6}, records, context(tmp_path))

    shuffled = [canonical_json(r.value) for r in first]
    assert sorted(shuffled) == sorted(lines) and shuffled != lines
    assert shuffled == [canonical_json(r.value) for r in again]
    assert shuffled != [canonical_json(r.value) for r in other]
    assert list(tmp_path.glob("augment-*")) == []  # its buckets are removed


def test_a_bucket_larger_than_the_memory_budget_is_split_and_the_order_is_the_same(tmp_path):
    records = demo(60) * 3  # equal records too: their keys differ by position
    roomy, _ = run_op({"op": "augment", "shuffle_seed": 5}, records, context(tmp_path))
    ctx = context(tmp_path)
    ctx.memory_budget_mb = 0  # every bucket is over budget: each is split again, down to MAX_DEPTH
    tight, _ = run_op({"op": "augment", "shuffle_seed": 5}, records, ctx)

    assert [r.line_json for r in tight] == [r.line_json for r in roomy]


def test_oversampling_repeats_each_smaller_class_up_to_the_largest(tmp_path):
    records = [chat(f"q{i}", "a", label="common") for i in range(7)] + \
              [chat(f"r{i}", "b", label="rare") for i in range(3)] + [chat("s", "c", label="single")]

    out, report = run_op({"op": "augment", "oversample_minority": {"field": "label"}}, records, context(tmp_path))

    assert Counter(r.extra["label"] for r in out) == {"common": 7, "rare": 7, "single": 7}
    assert Counter(r.value["messages"][0]["content"] for r in out if r.extra["label"] == "rare") == \
        {"r0": 3, "r1": 2, "r2": 2}
    assert report["added"] == 4 + 6 and report["records_out"] == 21
    assert report["details"]["classes"]["rare"] == {"records": 3, "repeated_to": 7}


def test_a_record_without_the_oversample_field_is_an_issue(tmp_path):
    ctx = context(tmp_path)
    records = [chat("q", "a", label="x"), Record(chat("r", "b").value, "in.jsonl", 2, "in.jsonl")]

    run_op({"op": "augment", "oversample_minority": {"field": "label"}}, records, ctx)

    assert ctx.log.issues == [{"file": "in.jsonl", "record": 2, "field": "label",
                               "message": "expected a value for the oversample_minority field (every record "
                                          "needs a class)"}]


# ---- the stage contract -----------------------------------------------------------------------------

def test_a_stage_counts_its_own_time_not_its_upstreams(tmp_path):
    class Passthrough(Stage):
        op = "passthrough"

        def process(self, records):
            yield from records

    def slow():
        for record in demo(5):
            time.sleep(0.05)
            yield record

    stage = Passthrough({})
    assert len(list(stage.run(slow()))) == 5
    assert stage.seconds < 0.05
    assert stage.report()["records_in"] == stage.report()["records_out"] == 5


# ---- operations written in their own modules (pii.py, near_dedup.py) ------------------------------------

def test_mask_pii_masks_every_message_and_counts_per_kind(tmp_path):
    pytest.importorskip("hanzo_ml.dataprep.pii")
    records = [chat("mail me at jane.doe@example.com", "sure"), chat("nothing here", "ok")]

    out, report = run_op({"op": "mask_pii", "kinds": ["email"], "tier": "rules"}, records,
                         context(tmp_path, threads=2))

    assert "jane.doe@example.com" not in out[0].value["messages"][0]["content"]
    assert "[REDACTED:email]" in out[0].value["messages"][0]["content"]
    assert report["details"]["redactions"] == {"email": 1}
    assert out[1].value == records[1].value


def test_dedup_near_drops_a_near_copy_and_keeps_the_first(tmp_path):
    pytest.importorskip("hanzo_ml.dataprep.near_dedup")
    text = " ".join(f"word{i}" for i in range(60))
    records = [chat(text, "answer"), chat(text + " extra", "answer"), chat("something else entirely", "no")]

    out, report = run_op({"op": "dedup_near", "shingle_words": 5, "bands": 14, "rows": 8, "threshold": 0.72,
                          "seed": 1, "against_parents": False}, records, context(tmp_path))

    assert [r.value["messages"][0]["content"] for r in out] == [text, "something else entirely"]
    assert report["removed"] == 1


def test_mask_pii_in_worker_processes_changes_the_right_message_of_each_form(tmp_path):
    pytest.importorskip("hanzo_ml.dataprep.pii")
    chat_record = chat("hello", "write to jane.doe@example.com")
    chat_record.line_json  # made before masking: masking must make it again
    pair = Record({"prompt": [{"role": "user", "content": "hi"}],
                   "chosen": [{"role": "assistant", "content": "ok"}],
                   "rejected": [{"role": "assistant", "content": "call 10.1.2.3 or bob@example.org"}]},
                  "in.jsonl", 2, "in.jsonl")

    out, report = run_op({"op": "mask_pii", "kinds": ["email", "ipv4"], "tier": "rules"}, [chat_record, pair],
                         context(tmp_path, threads=2))

    assert out[0].value["messages"] == [{"role": "user", "content": "hello"},
                                        {"role": "assistant", "content": "write to [REDACTED:email]"}]
    assert "[REDACTED:email]" in out[0].line_json
    assert out[1].value["prompt"][0]["content"] == "hi" and out[1].value["chosen"][0]["content"] == "ok"
    assert out[1].value["rejected"][0]["content"] == "call [REDACTED:ipv4] or [REDACTED:email]"
    assert report["details"]["redactions"] == {"email": 2, "ipv4": 1}


def started_worker():
    import os

    return lambda chunk: [(os.getpid(), x) for x in chunk]


@pytest.mark.parametrize("threads", [1, 2])
def test_ordered_map_answers_local_chunks_in_place_and_starts_workers_only_for_the_others(threads):
    import os

    from hanzo_ml.dataprep.parallel import ordered_map

    chunks = [[i, i + 1] for i in range(0, 40, 2)]
    local = lambda chunk: "here" if chunk[0] % 6 == 0 else None  # noqa: E731
    out = list(ordered_map(started_worker, iter(chunks), threads, local=local))
    assert [chunk for chunk, _ in out] == chunks
    for chunk, result in out:
        if chunk[0] % 6 == 0:
            assert result == "here"
        else:
            assert [x for _, x in result] == chunk
            assert (result[0][0] != os.getpid()) == (threads > 1)
    never = list(ordered_map(lambda: pytest.fail("no chunk needed a worker"), iter(chunks), threads,
                             local=lambda chunk: "here"))
    assert [result for _, result in never] == ["here"] * len(chunks)


def failing_worker():
    def fail(chunk):
        if 13 in chunk:
            raise ValueError(f"no 13 in {chunk}")
        return chunk
    return fail


def dying_worker():
    import os

    def die(chunk):
        if 13 in chunk:
            os._exit(3)
        return chunk
    return die


@pytest.mark.parametrize("setup, error, message", [
    (failing_worker, ValueError, r"no 13 in \[12, 13\]"),
    (dying_worker, RuntimeError, "ended without answering"),
])
def test_ordered_map_raises_what_a_worker_raised_and_a_worker_that_died(setup, error, message):
    from hanzo_ml.dataprep.parallel import ordered_map

    chunks = [[i, i + 1] for i in range(0, 40, 2)]
    seen = []
    with pytest.raises(error, match=message):
        for chunk, result in ordered_map(setup, iter(chunks), 2, inflight_per_worker=2):
            seen.append(result)
    assert seen == chunks[:len(seen)] and len(seen) <= 6  # in order, up to the chunk that failed


def test_ordered_map_stops_its_workers_when_the_reader_stops_early():
    import multiprocessing

    from hanzo_ml.dataprep.parallel import ordered_map

    results = ordered_map(started_worker, iter([[i] for i in range(100)]), 2)
    pids = {pid for _, result in zip(range(3), results) for pid, _ in result[1]}
    results.close()
    assert pids and not [p for p in multiprocessing.active_children() if p.pid in pids]
