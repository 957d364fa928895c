"""mask_pii: every message's content through dataprep.pii.PiiMasker; each match becomes [REDACTED:<kind>].
Runs in the job's worker processes, chunk by chunk, in order. Only the contents cross to the workers, and only the
masked ones come back (most texts hold no PII): the records stay in this process."""
from __future__ import annotations

from collections import Counter
from typing import Iterator

from hanzo_ml.dataprep.ops import Stage, chunked
from hanzo_ml.dataprep.parallel import ordered_map
from hanzo_ml.dataprep.records import Record

CHUNK = 512


def contents_of(value: dict) -> list[str]:
    """Every message's content, in the order of the value's keys and their messages."""
    return [message["content"] for messages in value.values() for message in messages]


def masking_worker(kinds: list[str]):
    from hanzo_ml.dataprep.pii import PiiMasker

    masker = PiiMasker(kinds)

    def mask_chunk(texts: list[list[str]]) -> tuple[list[tuple[int, int, str]], Counter]:
        """Each record's contents: (record, content, masked text) for the contents that changed, and the counts."""
        counts: Counter = Counter()
        changed = []
        for i, contents in enumerate(texts):
            for j, content in enumerate(contents):
                masked, found = masker.mask(content)
                counts.update(found)
                if masked != content:
                    changed.append((i, j, masked))
        return changed, counts

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
        for chunk, (changed, counts) in ordered_map(lambda: masking_worker(kinds), chunked(records, CHUNK),
                                                    self.context.threads,
                                                    send=lambda chunk: [contents_of(r.value) for r in chunk]):
            totals.update(counts)
            for i, j, masked in changed:
                record = chunk[i]
                [message for messages in record.value.values() for message in messages][j]["content"] = masked
                record.changed()
            yield from chunk
        self.details["redactions"] = {kind: totals.get(kind, 0) for kind in kinds}
