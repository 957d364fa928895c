"""mask_pii: every message's content through dataprep.pii.PiiMasker; each match becomes [REDACTED:<kind>].
Runs in the job's worker processes, chunk by chunk, in order."""
from __future__ import annotations

from collections import Counter
from typing import Iterator

from hanzo_ml.dataprep.ops import Stage, chunked
from hanzo_ml.dataprep.parallel import ordered_map
from hanzo_ml.dataprep.records import Record

CHUNK = 512


def masking_worker(kinds: list[str]):
    from hanzo_ml.dataprep.pii import PiiMasker

    masker = PiiMasker(kinds)

    def mask_chunk(values: list[dict]) -> tuple[list[dict], Counter]:
        """The records' values (only they cross to the worker and back), masked in place."""
        counts: Counter = Counter()
        for value in values:
            for messages in value.values():
                for message in messages:
                    message["content"], found = masker.mask(message["content"])
                    counts.update(found)
        return values, counts

    return mask_chunk


class MaskPii(Stage):
    op = "mask_pii"

    def __init__(self, params, context):
        super().__init__(params)
        self.context = context
        from hanzo_ml.dataprep.pii import PiiMasker  # noqa: F401 - fail at start-up, not in a worker

    def process(self, records: Iterator[Record]) -> Iterator[Record]:
        kinds = list(self.params["kinds"])
        totals: Counter = Counter()
        for chunk, (values, counts) in ordered_map(lambda: masking_worker(kinds), chunked(records, CHUNK),
                                                   self.context.threads, send=lambda chunk: [r.value for r in chunk]):
            totals.update(counts)
            for record, value in zip(chunk, values):
                record.value = value
                record.changed()
                yield record
        self.details["redactions"] = {kind: totals.get(kind, 0) for kind in kinds}
