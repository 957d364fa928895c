"""The operations of a preparation job, one module each. Every operation is a streaming stage: it takes the
records in order and yields the records it keeps (or adds), counting them as they pass, so memory does not grow
with the input. The split and tokenize steps are not stages: the pipeline (run.py) runs them on the split files.
"""
from __future__ import annotations

import time
from typing import Any, Iterable, Iterator

from hanzo_ml.dataprep.records import Record


class Stage:
    """records_in/out, removed, added, details and the seconds spent in this stage alone (not upstream)."""

    op = ""

    def __init__(self, params: dict[str, Any]):
        self.params = params
        self.records_in = 0
        self.records_out = 0
        self.removed = 0
        self.added = 0
        self.details: dict[str, Any] = {}
        self.seconds = 0.0

    def process(self, records: Iterator[Record]) -> Iterator[Record]:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the stage holds on disk (called whether the job succeeded or not)."""

    def run(self, upstream: Iterable[Record]) -> Iterator[Record]:
        waited = [0.0]

        def counted() -> Iterator[Record]:
            iterator = iter(upstream)
            while True:
                start = time.perf_counter()
                try:
                    record = next(iterator)
                except StopIteration:
                    waited[0] += time.perf_counter() - start
                    return
                waited[0] += time.perf_counter() - start
                self.records_in += 1
                yield record

        output = self.process(counted())
        while True:
            start = time.perf_counter()
            waited_before = waited[0]
            try:
                record = next(output)
            except StopIteration:
                self.seconds += time.perf_counter() - start - (waited[0] - waited_before)
                return
            self.seconds += time.perf_counter() - start - (waited[0] - waited_before)
            self.records_out += 1
            yield record

    def report(self) -> dict[str, Any]:
        params = {k: v for k, v in self.params.items() if k != "op"}
        return {"op": self.op, "params": params, "records_in": self.records_in,
                "records_out": self.records_out, "removed": self.removed, "added": self.added,
                "details": self.details, "seconds": round(max(self.seconds, 0.0), 4)}


def build_stage(op: dict[str, Any], context) -> Stage:
    """The stage for one operation of the spec (tokenize has none: it runs on the split files)."""
    name = op["op"]
    if name == "dedup_exact":
        from hanzo_ml.dataprep.ops.dedup_exact import DedupExact as cls
    elif name == "dedup_near":
        from hanzo_ml.dataprep.ops.dedup_near import DedupNear as cls
    elif name == "mask_pii":
        from hanzo_ml.dataprep.ops.mask_pii import MaskPii as cls
    elif name == "filter":
        from hanzo_ml.dataprep.ops.filter import Filter as cls
    elif name == "augment":
        from hanzo_ml.dataprep.ops.augment import Augment as cls
    else:
        raise ValueError(f"no stage for operation {name!r}")
    return cls(op, context)


def chunked(records: Iterator[Record], size: int) -> Iterator[list[Record]]:
    chunk: list[Record] = []
    for record in records:
        chunk.append(record)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
