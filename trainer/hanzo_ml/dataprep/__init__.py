"""Dataset preparation: raw files in many formats -> normalized, cleaned, split (and optionally tokenized) dataset
version files, as the `prepare-dataset` command (contracts/data-prep.ts) runs it."""
