"""Worker processes for the CPU-heavy per-record work (tokenizing, language detection, PII patterns).

Records go to the workers in chunks and come back in order, so the output does not depend on the number of
workers. With threads=1 the work runs in this process (no start-up cost, easier to debug).
"""
from __future__ import annotations

import multiprocessing
from typing import Any, Callable, Iterable, Iterator

_state: dict[str, Any] = {}


def _init(setup: Callable[[], Any]) -> None:
    _state["worker"] = setup()


def _call(chunk):
    return _state["worker"](chunk)


def ordered_map(setup: Callable[[], Callable[[Any], Any]], chunks: Iterable[Any], threads: int,
                inflight_per_worker: int = 4, send: Callable[[Any], Any] = lambda chunk: chunk,
                ) -> Iterator[tuple[Any, Any]]:
    """(chunk, fn(chunk)) for every chunk, in order; fn = setup() runs once per worker process (a tokenizer, a detector).
    At most threads x inflight_per_worker chunks are queued at a time, so memory stays bounded.
    send(chunk) is what the worker gets (only what it needs crosses the process boundary); fn sees the same."""
    if threads <= 1:
        worker = setup()
        for chunk in chunks:
            yield chunk, worker(send(chunk))
        return
    context = multiprocessing.get_context("fork")
    with context.Pool(threads, initializer=_init, initargs=(setup,)) as pool:
        pending = []
        for chunk in chunks:
            pending.append((chunk, pool.apply_async(_call, (send(chunk),))))
            if len(pending) >= threads * inflight_per_worker:
                sent, result = pending.pop(0)
                yield sent, result.get()
        for sent, result in pending:
            yield sent, result.get()
