"""Worker processes for the CPU-heavy per-record work (tokenizing, language detection, PII patterns).

Records go to the workers in chunks and come back in order, so the output does not depend on the number of
workers. With threads=1 the work runs in this process (no start-up cost, easier to debug).

Each worker process has a pipe of its own each way and takes the chunks dealt to it round-robin, so its answers
come back in the order the chunks went out, and this process pickles and unpickles them in its own thread.
multiprocessing.Pool did the same through three helper threads a pool (one pickling the tasks, one unpickling
the results, one waking up to check the workers whenever the pool ran dry) that cost this process about as much
CPU as its own work on the records of one stage, and it hangs when a worker dies; here a dead worker is an error.
"""
from __future__ import annotations

import collections
import contextlib
import fcntl
import multiprocessing
import pickle
import queue
import threading
import traceback
from typing import Any, Callable, Iterable, Iterator

STOP = None  # what this process sends a worker when it has no more chunks (a chunk is never None)
PIPE_BYTES = 1 << 20


class WorkerError(RuntimeError):
    """A worker process died, or could not send back what it raised."""


def _serve(inbox_end, outbox_end, unused_ends, setup: Callable[[], Callable[[Any], Any]]) -> None:
    """A worker's loop: chunks in, (True, result) or (False, exception, traceback) out, in order. One thread reads
    the chunks as they come and another sends the results, so the worker computes ahead (up to the chunks it was
    sent) while the sender is busy elsewhere, and the sender never waits on a worker that is itself waiting to send."""
    for end in unused_ends:
        end.close()
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    outbox: queue.SimpleQueue = queue.SimpleQueue()

    def receive() -> None:
        try:
            while True:
                chunk = inbox_end.recv()
                inbox.put(chunk)
                if chunk is STOP:
                    return
        except (EOFError, OSError):
            inbox.put(STOP)

    def deliver() -> None:
        with contextlib.suppress(OSError):
            while (answer := outbox.get()) is not STOP:
                outbox_end.send(answer)

    threading.Thread(target=receive, daemon=True).start()
    sender = threading.Thread(target=deliver)
    sender.start()
    try:
        fn = setup()
        while (chunk := inbox.get()) is not STOP:
            outbox.put((True, fn(chunk)))
    except BaseException as e:  # noqa: BLE001 - reported to the sender, which raises it
        outbox.put(_error_reply(e))
    finally:
        outbox.put(STOP)
        sender.join()


def _error_reply(error: BaseException) -> tuple:
    text = traceback.format_exc()
    try:
        pickle.loads(pickle.dumps(error))  # the sender could not read one that does not come back whole
    except Exception:  # noqa: BLE001 - its text is sent instead
        error = WorkerError(f"{type(error).__name__}: {error}")
    return False, error, text


def _roomy(ends: tuple) -> tuple:
    """A pipe that holds a few chunks (Linux: up to pipe-max-size, 1 MiB by default, instead of 64 KiB), so a send
    is one write, and the reader one wake-up, rather than a write for each 64 KiB."""
    with contextlib.suppress(AttributeError, OSError):
        fcntl.fcntl(ends[0].fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    return ends


class _Worker:
    def __init__(self, ctx, setup: Callable[[], Callable[[Any], Any]]):
        inbox_end, self.sender = _roomy(ctx.Pipe(duplex=False))
        self.receiver, outbox_end = _roomy(ctx.Pipe(duplex=False))
        self.process = ctx.Process(target=_serve, args=(inbox_end, outbox_end, (self.sender, self.receiver), setup),
                                   daemon=True)
        self.process.start()
        inbox_end.close()
        outbox_end.close()

    def send(self, chunk: Any) -> None:
        self.sender.send(chunk)

    def result(self) -> Any:
        try:
            answer = self.receiver.recv()
        except EOFError:
            self.process.join(1)
            raise WorkerError(f"a worker process (pid {self.process.pid}) ended without answering "
                              f"(exit code {self.process.exitcode})") from None
        if answer[0]:
            return answer[1]
        error, text = answer[1], answer[2]
        error.add_note(f"in the worker process (pid {self.process.pid}):\n{text}")
        raise error

    def stop(self, finished: bool) -> None:
        """finished: every answer was read, so the worker ends on its own; otherwise it is terminated."""
        if finished:
            with contextlib.suppress(OSError):
                self.sender.send(STOP)
            self.process.join(10)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join()
        self.sender.close()
        self.receiver.close()


def ordered_map(setup: Callable[[], Callable[[Any], Any]], chunks: Iterable[Any], threads: int,
                inflight_per_worker: int = 4, send: Callable[[Any], Any] = lambda chunk: chunk,
                local: Callable[[Any], Any] | None = None) -> Iterator[tuple[Any, Any]]:
    """(chunk, fn(chunk)) for every chunk, in order; fn = setup() runs once per worker process (a tokenizer, a detector).
    At most threads x inflight_per_worker chunks are queued at a time, so memory stays bounded.
    send(chunk) is what the worker gets (only what it needs crosses the process boundary); fn sees the same.
    local(chunk), when given, is the result of a chunk that needs no worker (None: it needs one): such a chunk is
    answered here, in its place in the order, and the worker processes start at the first chunk that needs them
    (none at all when no chunk does). An exception a worker raises is raised here, with the worker's traceback."""
    if threads <= 1:
        worker = None
        for chunk in chunks:
            done = local(chunk) if local is not None else None
            if done is None:
                worker = worker or setup()
                done = worker(send(chunk))
            yield chunk, done
        return
    workers: list[_Worker] = []
    finished = False
    try:
        pending: collections.deque = collections.deque()
        dealt = 0
        for chunk in chunks:
            done = local(chunk) if local is not None else None
            if done is None:
                if not workers:
                    ctx = multiprocessing.get_context("fork")
                    workers = [_Worker(ctx, setup) for _ in range(threads)]
                worker = workers[dealt % threads]
                dealt += 1
                worker.send(send(chunk))
                pending.append((chunk, worker, True))
            else:
                pending.append((chunk, done, False))
            while len(pending) >= threads * inflight_per_worker or (pending and not pending[0][2]):
                sent, result, remote = pending.popleft()
                yield sent, result.result() if remote else result
        for sent, result, remote in pending:
            yield sent, result.result() if remote else result
        finished = True
    finally:
        for worker in workers:
            worker.stop(finished)
