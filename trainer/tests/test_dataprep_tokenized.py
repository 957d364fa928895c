"""The batch tokenization of prepare-dataset (dataprep.tokenized.labelled_examples) against the trainer's own
chat.label_assistant_turns, and the language filter's bounded prefix."""
from __future__ import annotations

import pytest

from hanzo_ml.chat import label_assistant_turns, load_tokenizer
from hanzo_ml.dataprep import tokenized
from hanzo_ml.dataprep.ops.filter import LANGUAGE_PREFIX_CHARS, language_prefix
from hanzo_ml.dataprep.tokenized import labelled_examples
from hanzo_ml.errors import InputError
from helpers import demo_records


def assert_as_the_trainer_makes_them(tokenizer, made, conversations) -> None:
    for (input_ids, labels), messages in zip(made, conversations, strict=True):
        expected = label_assistant_turns(tokenizer, messages)
        assert input_ids.tolist() == expected.input_ids and labels.tolist() == expected.labels


def use_positions(monkeypatch, positions: str) -> None:
    """Character offsets: the path of every tokenizer that is not byte-level BPE."""
    if positions == "character offsets":
        monkeypatch.setattr(tokenized, "token_byte_lengths", lambda _: None)


def test_batch_labelling_is_the_trainers_labelling_for_every_shape_of_conversation(tiny_base_dir):
    tokenizer = load_tokenizer(tiny_base_dir)
    conversations = [r["messages"] for r in demo_records(20)] + [
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
         {"role": "assistant", "content": "hello"}, {"role": "user", "content": "and now?"},
         {"role": "assistant", "content": "now this"}],
    ]

    made = labelled_examples(tokenizer, conversations)

    assert_as_the_trainer_makes_them(tokenizer, made, conversations)
    assert labelled_examples(tokenizer, []) == []


def varied_conversations() -> list[list[dict]]:
    """Short and multi-turn chats, a system prompt, non-ASCII text (accents, CJK, an emoji split across byte
    tokens), answers that open or close with whitespace or newlines, an empty answer."""
    def chat(*turns: tuple[str, str]) -> list[dict]:
        return [{"role": role, "content": content} for role, content in turns]

    return [r["messages"] for r in demo_records(12)] + [
        chat(("system", "Be brief."), ("user", "hi"), ("assistant", "hello"), ("user", "and now?"),
             ("assistant", "now this")),
        chat(("user", "héllo wörld"), ("assistant", "ça va 😀 très bien, 你好")),
        chat(("user", "q"), ("assistant", "\n\nanswer after blank lines")),
        chat(("user", "q "), ("assistant", "  leading and trailing spaces  ")),
        chat(("user", "q"), ("assistant", "")),
        chat(("user", "a"), ("assistant", "b"), ("user", "c"), ("assistant", "d\n"), ("user", "e"),
             ("assistant", "f")),
    ]


def spy_on_fallback(monkeypatch) -> list[int]:
    """How many conversations took the trainer's path (prefixes encoded separately)."""
    taken: list[int] = []
    original = tokenized.labels_by_prefix_encodes

    def counted(tokenizer, plans, wholes):
        taken.append(len(plans))
        return original(tokenizer, plans, wholes)

    monkeypatch.setattr(tokenized, "labels_by_prefix_encodes", counted)
    return taken


@pytest.mark.parametrize("positions", ["byte lengths", "character offsets"])
def test_one_encode_a_conversation_gives_the_trainers_ids_and_labels(tiny_base_dir, monkeypatch, positions):
    tokenizer = load_tokenizer(tiny_base_dir)
    assert tokenized.token_byte_lengths(tokenizer) is not None  # the tiny base is byte-level BPE
    use_positions(monkeypatch, positions)
    fallback = spy_on_fallback(monkeypatch)
    conversations = varied_conversations()

    made = labelled_examples(tokenizer, conversations)

    assert_as_the_trainer_makes_them(tokenizer, made, conversations)
    assert sum(fallback) == 0  # every conversation was encoded once


@pytest.mark.parametrize("positions", ["byte lengths", "character offsets"])
def test_a_turn_boundary_inside_a_token_takes_the_trainers_path_and_gives_its_labels(tiny_base_dir, monkeypatch,
                                                                                   positions):
    tokenizer = load_tokenizer(tiny_base_dir)
    # The generation prompt ends with a space the answer's first word joins: " hello" is one pre-token, so the
    # prompt's end falls inside a token of the whole conversation.
    tokenizer.chat_template = ("{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '<|end|>' }}{% endfor %}"
                               "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}")
    use_positions(monkeypatch, positions)
    fallback = spy_on_fallback(monkeypatch)
    conversations = varied_conversations()

    made = labelled_examples(tokenizer, conversations)

    assert_as_the_trainer_makes_them(tokenizer, made, conversations)
    assert 0 < sum(fallback) < len(conversations)  # the answers opening with a letter; not those opening with a space


def test_a_template_that_breaks_token_prefixes_is_refused_as_the_trainer_refuses_it(tiny_base_dir):
    tokenizer = load_tokenizer(tiny_base_dir)
    # The last turn's end is the whole conversation; an earlier one is rendered with a marker the whole lacks.
    tokenizer.chat_template = ("{% for m in messages %}{{ m['role'] + ': ' + m['content'] }}"
                               "{% if loop.last %}{{ ' END' }}{% else %}{{ ' | ' }}{% endif %}{% endfor %}"
                               "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}")
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]

    with pytest.raises(InputError, match="token prefixes"):
        label_assistant_turns(tokenizer, messages)
    with pytest.raises(InputError, match="token prefixes"):
        labelled_examples(tokenizer, [messages])


def test_language_is_read_from_a_bounded_prefix_cut_at_a_space():
    text = "word " * 200

    prefix = language_prefix(text)

    assert len(prefix) <= LANGUAGE_PREFIX_CHARS and prefix.endswith("word") and text.startswith(prefix)
    assert language_prefix("short text") == "short text"
    assert len(language_prefix("x" * 1000)) == LANGUAGE_PREFIX_CHARS  # no space to cut at: a hard cut


# ---- the piece cache (dataprep.piece_cache) ------------------------------------------------------------

def ascii_soup(rng, specials: list[str]) -> str:
    """Text made to hit the GPT-2 expression's corners: contractions, digits, punctuation runs, control
    characters, runs of spaces and line breaks, added tokens in the middle of words."""
    import string

    alphabet = string.printable + "'''stldmv" + "\x00\x01\x1c\x1f\x7f" + "    \n\n\t\r\x0b\x0c"
    parts = []
    for _ in range(rng.randint(1, 12)):
        parts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))))
        if rng.random() < 0.3:
            parts.append(rng.choice(specials))
        if rng.random() < 0.3:
            parts.append(rng.choice(["'s", "'ll", " 're", "  ", " \n ", "'", "n't", "123", " 4x", "   \n"]))
    return "".join(parts)


def test_the_piece_cache_gives_the_rust_encodes_ids_on_ascii_text(tiny_base_dir):
    import random

    from hanzo_ml.chat import render
    from hanzo_ml.dataprep.piece_cache import PieceCache

    tokenizer = load_tokenizer(tiny_base_dir)
    raw = tokenizer._tokenizer
    cache = PieceCache.for_tokenizer(raw)
    assert cache is not None  # the tiny base is byte-level BPE
    rng = random.Random(7)
    texts = [render(tokenizer, r["messages"]) for r in demo_records(50)] + \
        [ascii_soup(rng, sorted(cache.added)) for _ in range(3000)]

    for _ in range(2):  # cold, then every piece from the cache
        made = [cache.encode(text) for text in texts]
        assert made == [raw.encode(text, add_special_tokens=False).ids for text in texts]
        assert [cache.encode_array(text).tolist() for text in texts] == made


def test_the_piece_cache_leaves_other_text_and_other_tokenizers_to_the_rust_encode(tiny_base_dir):
    from tokenizers import Tokenizer, models, pre_tokenizers

    from hanzo_ml.dataprep.piece_cache import PieceCache
    from hanzo_ml.dataprep.tokenized import encode_ids

    tokenizer = load_tokenizer(tiny_base_dir)
    cache = PieceCache.for_tokenizer(tokenizer._tokenizer)
    accented = "Déjà vu: ça marche très bien."
    assert cache.encode(accented) is None
    assert [ids.tolist() for ids in encode_ids(tokenizer, [accented, "plain"])] == [
        tokenizer._tokenizer.encode(t, add_special_tokens=False).ids for t in (accented, "plain")]
    word_level = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    assert PieceCache.for_tokenizer(word_level) is None


# ---- the renders (dataprep.fast_render) ---------------------------------------------------------------

def test_the_compiled_template_renders_what_chat_render_renders(tiny_base_dir):
    from hanzo_ml.chat import render
    from hanzo_ml.dataprep.fast_render import renderer

    tokenizer = load_tokenizer(tiny_base_dir)
    fast = renderer(tokenizer)
    assert fast.__name__ == "fast"  # the product's template passes the probes
    conversations = [r["messages"] for r in demo_records(30)] + varied_conversations() + [
        [{"role": "user", "content": "hi", "name": None}, {"role": "assistant", "content": "hello"}]]

    for messages in conversations:
        for prompt in (False, True):
            assert fast(messages, add_generation_prompt=prompt) == render(tokenizer, messages,
                                                                          add_generation_prompt=prompt)


def test_a_compiled_template_that_renders_a_probe_otherwise_is_not_used(tiny_base_dir, monkeypatch):
    from hanzo_ml.chat import render
    from hanzo_ml.dataprep import fast_render

    tokenizer = load_tokenizer(tiny_base_dir)
    compile_template = fast_render.compiled_template
    # a compilation that drops the generation prompt: the probes with the prompt tell it apart
    monkeypatch.setattr(fast_render, "compiled_template", lambda template: compile_template(
        template.replace("add_generation_prompt", "false")))
    messages = [{"role": "user", "content": "hi"}]

    chosen = fast_render.renderer(tokenizer)

    assert chosen.__name__ == "slow"
    monkeypatch.undo()
    assert chosen(messages, add_generation_prompt=True) == render(tokenizer, messages, add_generation_prompt=True)


def test_packed_examples_come_back_as_they_went_none_and_empty_included():
    import numpy as np

    from hanzo_ml.dataprep.tokenized import PackedExamples

    examples = [(np.array([5, 6, 7], np.int32), np.array([-100, 6, 7], np.int32)), None,
                (np.zeros(0, np.int32), np.zeros(0, np.int32)), (np.array([9], np.int32), np.array([9], np.int32)), None]

    back = PackedExamples.pack(examples).unpack()

    assert [None if e is None else (e[0].tolist(), e[1].tolist()) for e in back] == \
        [None if e is None else (e[0].tolist(), e[1].tolist()) for e in examples]
    assert PackedExamples.pack([]).unpack() == [] and PackedExamples.pack([None]).unpack() == [None]


def test_a_message_with_a_reasoning_field_is_rendered_by_chat_render(tiny_base_dir):
    from hanzo_ml.chat import render
    from hanzo_ml.dataprep.fast_render import renderer

    tokenizer = load_tokenizer(tiny_base_dir)
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}|{{ m.get('thinking', '-') }};{% endfor %}"
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "reasoning_content": "why"}]

    assert renderer(tokenizer)(messages) == render(tokenizer, messages)
