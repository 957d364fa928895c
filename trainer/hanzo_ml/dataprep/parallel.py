"""Worker processes for the CPU-heavy per-record work (tokenizing, language detection, PII patterns).

Records go to the workers in chunks and come back in order, so the output does not depend on the number of
workers. With threads=1 the work runs in this process (no start-up cost, easier to debug).
"""
from __future__ import annotations

import collections
import contextlib
import multiprocessing
from typing import Any, Callable, Iterable, Iterator

_state: dict[str, Any] = {}


def _init(setup: Callable[[], Any]) -> None:
    _state["worker"] = setup()


def _call(chunk):
    return _state["worker"](chunk)


def ordered_map(setup: Callable[[], Callable[[Any], Any]], chunks: Iterable[Any], threads: int,
                inflight_per_worker: int = 4, send: Callable[[Any], Any] = lambda chunk: chunk,
                local: Callable[[Any], Any] | None = None) -> Iterator[tuple[Any, Any]]:
    """(chunk, fn(chunk)) for every chunk, in order; fn = setup() runs once per worker process (a tokenizer, a detector).
    At most threads x inflight_per_worker chunks are queued at a time, so memory stays bounded.
    send(chunk) is what the worker gets (only what it needs crosses the process boundary); fn sees the same.
    local(chunk), when given, is the result of a chunk that needs no worker (None: it needs one): such a chunk is
    answered here, in its place in the order, and the worker processes start at the first chunk that needs them
    (none at all when no chunk does)."""
    if threads <= 1:
        worker = None
        for chunk in chunks:
            done = local(chunk) if local is not None else None
            if done is None:
                worker = worker or setup()
                done = worker(send(chunk))
            yield chunk, done
        return
    with contextlib.ExitStack() as stack:
        pool = None
        pending: collections.deque = collections.deque()
        for chunk in chunks:
            done = local(chunk) if local is not None else None
            if done is None:
                if pool is None:
                    pool = stack.enter_context(multiprocessing.get_context("fork").Pool(
                        threads, initializer=_init, initargs=(setup,)))
                pending.append((chunk, pool.apply_async(_call, (send(chunk),)), True))
            else:
                pending.append((chunk, done, False))
            while len(pending) >= threads * inflight_per_worker or (pending and not pending[0][2]):
                sent, result, async_ = pending.popleft()
                yield sent, result.get() if async_ else result
        for sent, result, async_ in pending:
            yield sent, result.get() if async_ else result
