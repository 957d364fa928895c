"""The chat template's renders (chat.render) without apply_chat_template's work around each call.

apply_chat_template copies every message into plain JSON types, renames reasoning fields, builds the template's
variables and only then runs the compiled Jinja template: on the data bench's two-message records that was about
35 us a render of which the template itself took about 15. For messages that are already plain (a str role and content and
no other key, as a prepared record's are) the copy changes nothing, so the compiled template (transformers' own compilation,
cached) is called directly with the same variables, and its globals are merged with them once instead of at
every call (direct_call: 12 -> 4 us a render). Whether that gives chat.render's text is checked once per
tokenizer on PROBES (every role, several turns, with and without the generation prompt); a tokenizer whose template
renders any probe differently, or a conversation with any other key or value, keeps chat.render.
"""
from __future__ import annotations

from typing import Callable

Renderer = Callable[..., str]
# the keys of a message the direct call passes as they are (apply_chat_template renames reasoning fields, drops None)
PLAIN_KEYS = {"role", "content"}

PROBES = [
    [{"role": "user", "content": "How do I reset it?"}, {"role": "assistant", "content": "Click 'Reset'.\n\nDone."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
     {"role": "assistant", "content": "hello"}, {"role": "user", "content": "and now? {{ x }} <|end|>"},
     {"role": "assistant", "content": ""}],
    [{"role": "user", "content": " leading and trailing spaces "}],
]

_RENDERERS: dict[int, tuple[object, Renderer]] = {}


def renderer(tokenizer) -> Renderer:
    """render(messages, add_generation_prompt=False) for this tokenizer, worked out once per tokenizer."""
    known = _RENDERERS.get(id(tokenizer))
    if known is None or known[0] is not tokenizer:  # kept with its tokenizer, so the id is not reused meanwhile
        known = _RENDERERS[id(tokenizer)] = (tokenizer, make_renderer(tokenizer))
    return known[1]


def compiled_template(source: str):
    """The template as apply_chat_template compiles it (transformers caches the compilation)."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    return _compile_jinja_template(source)


def make_renderer(tokenizer) -> Renderer:
    from hanzo_ml.chat import render

    def slow(messages, add_generation_prompt: bool = False) -> str:
        return render(tokenizer, messages, add_generation_prompt=add_generation_prompt)

    try:
        template = compiled_template(tokenizer.chat_template)
    except Exception:  # noqa: BLE001 - another transformers, or a template apply_chat_template picks by name
        return slow
    call = direct_call(template, {"tools": None, "documents": None, **tokenizer.special_tokens_map})

    def fast(messages, add_generation_prompt: bool = False) -> str:
        if not all(message.keys() <= PLAIN_KEYS and type(message["role"]) is str and type(message["content"]) is str
                   for message in messages):
            return slow(messages, add_generation_prompt)
        try:
            return call(messages, add_generation_prompt)
        except Exception:  # noqa: BLE001 - chat.render raises it as the trainer would (jinja's own traceback)
            return slow(messages, add_generation_prompt)

    try:
        same = all(fast(probe, prompt) == slow(probe, prompt) for probe in PROBES for prompt in (False, True))
    except Exception:  # noqa: BLE001 - a template that refuses a probe is left to chat.render
        same = False
    return fast if same else slow


def direct_call(template, variables: dict) -> Callable[[list, bool], str]:
    """template.render(messages=..., add_generation_prompt=..., **variables), without what render does on each call
    that gives the same result every time: it merges the template's globals (a ChainMap, walked in Python: about
    two thirds of a render of a short conversation) with the variables. Here they are merged once; the context is
    made by jinja's own new_context, as render makes it."""
    from jinja2.runtime import new_context

    environment, name, blocks, root = template.environment, template.name, template.blocks, template.root_render_func
    constant = {**dict(template.globals), **variables}

    def call(messages: list, add_generation_prompt: bool) -> str:
        context = new_context(environment, name, blocks,
                              {"messages": messages, "add_generation_prompt": add_generation_prompt}, False, constant,
                              None)
        return environment.concat(root(context))  # type: ignore[attr-defined]
    return call
