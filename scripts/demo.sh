#!/usr/bin/env bash
# The main job: bootstrap, then fine-tune the bundled tiny model on the bundled dataset through the whole
# pipeline on the embedded stack (Temporal dev server, PGlite, file:// objects), approve, and print a summary.
# Pass --wait-for-approval to approve yourself (hanzo-ml pipeline approve <id> --reason "...").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec bin/hanzo-ml demo "$@"
