#!/usr/bin/env bash
# Build the real Kubernetes control plane the cluster tests run against, from the Go module proxy alone:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler (deploy/test-cluster/tools, one module so they
# share one client-go/apimachinery build) and KWOK (fake GPU nodes). The binaries are cached by the hash of the
# module files and the versions below, outside the checkout, so a fresh clone only builds them once per machine.
# Kueue (deploy/test-cluster/kueue) is cached apart, under its own key, so adding or bumping it never rebuilds the
# control plane.
#   scripts/cluster-tools.sh                    prints the bin directory (building first when needed)
#   scripts/cluster-tools.sh --installed        prints it only if it is already built (exit 1 otherwise)
#   scripts/cluster-tools.sh kueue [--installed] the same for Kueue's directory (kueue, crds/, webhooks.yaml)
#   scripts/cluster-tools.sh helm [--installed]  the same for Helm's directory (helm), which lints, renders and
#                                                dry-runs deploy/helm/hanzo-ml in the tests
# Cold on 2 cores this takes 20-30 minutes (about 2,000 CPU-seconds, ~6 GB of Go build cache) plus ~10 for Kueue
# and a few for Helm; warm, a second.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${HANZO_ML_CACHE:-$HOME/.cache/hanzo-ml}
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
K8S_VERSION=v1.36.3
KWOK_VERSION=v0.8.0
TOOLS=deploy/test-cluster/tools
key=$(cat "$TOOLS/go.mod" "$TOOLS/go.sum" <(echo "$K8S_VERSION $KWOK_VERSION") <("$GO" version) | sha256sum | cut -c1-16)
BIN="$CACHE/cluster-tools-$key"
say() { printf 'cluster-tools: %s\n' "$*" >&2; }

KUEUE_VERSION=v0.19.2
KUEUE_MOD=deploy/test-cluster/kueue
# The one change to Kueue's manager: with internal certificate management off, v0.19.2 reads its metrics
# certificate from a hard-coded /etc/kueue/metrics/certs and exits when it is absent. The build takes the
# directory from KUEUE_METRICS_CERT_DIR instead (falling back to that path): the build compiles a patched copy of
# cmd/kueue/main.go (it imports only Kueue's public packages) as the main package of a copy of the wrapper module,
# so the module cache and the checkout stay untouched.
KUEUE_PATCH='s|metricsCertPath := "/etc/kueue/metrics/certs"|metricsCertPath := os.Getenv("KUEUE_METRICS_CERT_DIR"); if metricsCertPath == "" { metricsCertPath = "/etc/kueue/metrics/certs" }|'
kueue_key=$(cat "$KUEUE_MOD/go.mod" "$KUEUE_MOD/go.sum" <(echo "$KUEUE_VERSION $KUEUE_PATCH") <("$GO" version) | sha256sum | cut -c1-16)
KUEUE_BIN="$CACHE/kueue-$kueue_key"

# Helm, cached apart like Kueue. `go install module@version` builds it as released (no replace directives), with
# the version stamps its Makefile sets: the release version, and the Kubernetes version `helm template` and
# `helm lint` assume (1.<minor of the client-go it builds with>, instead of the 1.20 compiled in).
HELM_VERSION=v3.22.0
build_helm() {
  [ -f "$HELM_BIN/.complete" ] && return
  local t0=$SECONDS gomod minor stamps
  # The Kubernetes minor version comes from the client-go Helm's go.mod requires (its Makefile does the same).
  # `go mod download` fetches the module on a cold cache and names its go.mod.
  gomod=$(cd / && "$GO" mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
  minor=$(sed -n 's/^\tk8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod")
  [ -n "$minor" ] || { say "helm: no k8s.io/client-go requirement in '$gomod'"; exit 1; }
  stamps="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for pkg in chartutil lint/rules; do
    stamps="$stamps -X helm.sh/helm/v3/pkg/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/$pkg.k8sVersionMinor=$minor"
  done
  say "building helm $HELM_VERSION"
  rm -rf "$HELM_BIN.tmp" && mkdir -p "$HELM_BIN.tmp"
  (cd / && GOBIN="$HELM_BIN.tmp" nice "$GO" install -trimpath -ldflags "-s -w $stamps" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION")
  touch "$HELM_BIN.tmp/.complete"
  rm -rf "$HELM_BIN" && mv "$HELM_BIN.tmp" "$HELM_BIN"
  say "built helm in $((SECONDS - t0)) s"
}
# Keyed by the version, the build recipe above and the Go version: changing any of them builds a new one.
helm_key=$(cat <(echo "$HELM_VERSION") <(declare -f build_helm) <("$GO" version) | sha256sum | cut -c1-16)
HELM_BIN="$CACHE/helm-$helm_key"

component=control-plane
case "${1:-}" in kueue|helm) component=$1; shift ;; esac
if [ "${1:-}" = "--installed" ]; then
  case $component in kueue) dir=$KUEUE_BIN ;; helm) dir=$HELM_BIN ;; *) dir=$BIN ;; esac
  [ -f "$dir/.complete" ] && echo "$dir" && exit 0
  exit 1
fi
mkdir -p "$CACHE"
# Helm shares nothing with the control plane's build but the Go caches (safe to share): its own lock, so it never
# waits for a half-hour control-plane build.
if [ "$component" = helm ]; then
  exec 7>"$CACHE/.cluster-tools-helm.lock"
  flock 7
  build_helm
  echo "$HELM_BIN"
  exit 0
fi
exec 8>"$CACHE/.cluster-tools.lock"
flock 8

build_kueue() {
  [ -f "$KUEUE_BIN/.complete" ] && return
  local src t0=$SECONDS
  # `go list -m` does not download: on a cold module cache it prints an empty line. Fetch the module first.
  (cd "$KUEUE_MOD" && "$GO" mod download sigs.k8s.io/kueue)
  src=$(cd "$KUEUE_MOD" && "$GO" list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
  [ -f "$src/cmd/kueue/main.go" ] || { say "kueue: sigs.k8s.io/kueue is not in the module cache after download (dir '$src')"; exit 1; }
  rm -rf "$KUEUE_BIN.tmp" && mkdir -p "$KUEUE_BIN.tmp/crds" "$KUEUE_BIN.tmp/src"
  cp "$KUEUE_MOD/go.mod" "$KUEUE_MOD/go.sum" "$KUEUE_BIN.tmp/src/"
  sed "$KUEUE_PATCH" "$src/cmd/kueue/main.go" > "$KUEUE_BIN.tmp/src/main.go"
  grep -q KUEUE_METRICS_CERT_DIR "$KUEUE_BIN.tmp/src/main.go" || { say "kueue: the metrics-certificate patch no longer applies to $src/cmd/kueue/main.go"; exit 1; }
  say "building kueue $KUEUE_VERSION"
  (cd "$KUEUE_BIN.tmp/src" && nice "$GO" build -trimpath -ldflags "-s -w" -o "$KUEUE_BIN.tmp/kueue" .)
  # The CRDs and webhook registrations ship in the module; the harness applies them from here, offline.
  cp "$src"/config/components/crd/bases/*.yaml "$KUEUE_BIN.tmp/crds/"
  cp "$src/config/components/webhook/manifests.yaml" "$KUEUE_BIN.tmp/webhooks.yaml"
  chmod -R u+w "$KUEUE_BIN.tmp"
  rm -rf "$KUEUE_BIN.tmp/src"
  touch "$KUEUE_BIN.tmp/.complete"
  rm -rf "$KUEUE_BIN" && mv "$KUEUE_BIN.tmp" "$KUEUE_BIN"
  say "built kueue in $((SECONDS - t0)) s"
}
if [ "$component" = kueue ]; then build_kueue; echo "$KUEUE_BIN"; exit 0; fi
if [ -f "$BIN/.complete" ]; then build_kueue; echo "$BIN"; exit 0; fi

mkdir -p "$BIN.tmp"
# Kueue and kubectl read the server's version: stamp it, since a module build carries no git metadata.
ver="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1"
ver="$ver -X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"
build() {  # build <output name> <package>
  [ -x "$BIN.tmp/$1" ] && return
  say "building $1 ($2)"
  local t0=$SECONDS
  (cd "$TOOLS" && nice "$GO" build -trimpath -ldflags "-s -w $ver" -o "$BIN.tmp/$1.part" "$2")
  mv "$BIN.tmp/$1.part" "$BIN.tmp/$1"
  say "built $1 in $((SECONDS - t0)) s"
}
build etcd go.etcd.io/etcd/server/v3
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
if [ ! -x "$BIN.tmp/kwok" ]; then
  say "building kwok $KWOK_VERSION"
  t0=$SECONDS
  GOBIN="$BIN.tmp" nice "$GO" install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  say "built kwok in $((SECONDS - t0)) s"
fi
# KWOK's standalone binary does not add the Stage objects that make pods and nodes progress: ship the ones we
# use from its module so the test harness needs no network.
# `go mod download -json` fetches the module when the cache lacks it (a partial earlier build) and names its dir.
KWOK_SRC=$(cd / && "$GO" mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
mkdir -p "$BIN.tmp/kwok-stages"
cp "$KWOK_SRC"/kustomize/stage/node/fast/node-initialize.yaml "$KWOK_SRC"/kustomize/stage/node/heartbeat/node-heartbeat.yaml "$BIN.tmp/kwok-stages/"
chmod -R u+w "$BIN.tmp/kwok-stages"
touch "$BIN.tmp/.complete"
rm -rf "$BIN"
mv "$BIN.tmp" "$BIN"
build_kueue
echo "$BIN"
