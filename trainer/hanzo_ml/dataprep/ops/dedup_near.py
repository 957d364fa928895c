"""dedup_near: MinHash LSH over word shingles of the whole conversation (dataprep.near_dedup); the first record
of a near-duplicate group is kept. With against_parents, an earlier version's records are references: compared
against, never output. The signatures and band keys are made by the job's worker processes, chunk by chunk in
order; the decisions (which depend on the records before) are made here, in order, a chunk at a time
(NearDuplicateFilter.duplicates)."""
from __future__ import annotations

from typing import Iterator

from hanzo_ml.dataprep.ops import Stage, chunked
from hanzo_ml.dataprep.parallel import ordered_map
from hanzo_ml.dataprep.records import Record

CHUNK = 256


class DedupNear(Stage):
    op = "dedup_near"

    def __init__(self, params, context):
        super().__init__(params)
        from hanzo_ml.dataprep.near_dedup import NearDuplicateFilter

        self.context = context
        self.filter = NearDuplicateFilter(params["shingle_words"], params["bands"], params["rows"],
                                          params["threshold"], params["seed"], context.work_dir,
                                          context.memory_budget_mb)

    def process(self, records: Iterator[Record]) -> Iterator[Record]:
        if self.params.get("against_parents"):
            for record in self.context.parent_records():
                self.filter.add_reference(record.text())
        for chunk, signed in ordered_map(self.filter.signer, chunked(records, CHUNK), self.context.threads,
                                         send=lambda chunk: [record.text() for record in chunk]):
            for record, duplicate in zip(chunk, self.filter.duplicates(signed)):
                if duplicate:
                    self.removed += 1
                else:
                    yield record
        self.details.update(self.filter.stats())
