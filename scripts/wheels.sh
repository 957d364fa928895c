#!/usr/bin/env bash
# The wheels of one Python lock file, downloaded once into the cache and shared by everything installed from that
# lock: the bootstrap's venv, the trainer image and the control-plane image (scripts/images.sh) install from this
# directory offline (pip --no-index --find-links), so torch's several GB come from PyPI once per lock.
#   scripts/wheels.sh LOCKFILE              prints the directory (downloading first when needed)
#   scripts/wheels.sh LOCKFILE --installed  prints it only if it is already complete (exit 1 otherwise)
# Keyed by the lock's content and the interpreter's ABI (cpython-311): the images' Python (Debian bookworm's 3.11)
# takes the same wheels as the machine's. Binary wheels only: an sdist would need a compiler in every image.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${HANZO_ML_CACHE:-$HOME/.cache/hanzo-ml}
PYTHON=${PYTHON:-python3}
lock=${1:?usage: scripts/wheels.sh LOCKFILE [--installed]}
[ -f "$lock" ] || { echo "wheels: $lock does not exist" >&2; exit 2; }
abi=$("$PYTHON" -c 'import sys; print(sys.implementation.cache_tag)')
dir="$CACHE/wheels-$(cat "$lock" <(echo "$abi") | sha256sum | cut -c1-16)"
[ -f "$dir/.complete" ] && { echo "$dir"; exit 0; }
[ "${2:-}" = "--installed" ] && exit 1

printf 'wheels: downloading the wheels of %s into %s\n' "$lock" "$dir" >&2
# With dependencies: a pip freeze leaves out setuptools, which torch requires; the download adds what the pins
# leave open exactly as `pip install -r LOCK` does. An interrupted download resumes (pip skips the files it has).
# A layer lock whose requirements are all pinned in another lock says `# wheels: no-deps` (liger-kernel would
# otherwise bring a second torch).
deps=(); grep -qx '# wheels: no-deps' "$lock" && deps=(--no-deps)
"$PYTHON" -m pip download -q --disable-pip-version-check --only-binary=:all: "${deps[@]}" -d "$dir.tmp" -r "$lock" >&2
rm -rf "$dir"
mv "$dir.tmp" "$dir"
touch "$dir/.complete"
echo "$dir"
