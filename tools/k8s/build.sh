#!/usr/bin/env bash
# Build the Kubernetes control plane used by the integration tests into a cache
# outside the repository, keyed by version:
#   kube-apiserver, kube-controller-manager, kube-scheduler (k8s.io/kubernetes),
#   etcd (go.etcd.io/etcd/server/v3) and kwok (sigs.k8s.io/kwok), plus KWOK's
#   stage files concatenated into kwok-stages.yaml.
# The build is skipped when the stamp file matches. Exit codes:
#   0 built or already cached, 4 impossible (no go, no module proxy, timeout or
#   compile failure).
# The module pinned by tools/k8s/go.mod and go.sum is used when present; without
# them the throwaway module is generated from k8s.io/kubernetes's go.mod.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
STAGING_VERSION=${STAGING_VERSION:-v0.${K8S_VERSION#v1.}}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
CACHE=${MERIDIAN_K8S_CACHE:-$HOME/.cache/meridian/k8s-$K8S_VERSION}
BUILD_TIMEOUT=${MERIDIAN_K8S_BUILD_TIMEOUT:-2400}
STAMP_WANT="kubernetes=$K8S_VERSION staging=$STAGING_VERSION kwok=$KWOK_VERSION binaries=kube-apiserver,kube-controller-manager,kube-scheduler,etcd,kwok"

here=$(cd "$(dirname "$0")" && pwd)
log() { printf '[k8s-build %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 4; }

if [[ -f "$CACHE/stamp" && "$(cat "$CACHE/stamp")" == "$STAMP_WANT" ]]; then
	log "cached in $CACHE (stamp matches), skipping build"
	exit 0
fi
command -v go >/dev/null || die "go is not installed"
mkdir -p "$CACHE/bin"
rm -f "$CACHE/stamp"

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod
work=$(mktemp -d "${TMPDIR:-/tmp}/meridian-k8s-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$here/tools.go" "$work/tools.go"
t0=$(date +%s)

# 1. A throwaway module: require k8s.io/kubernetes and replace every staging
#    module (which kubernetes maps to ./staging at v0.0.0) with its published
#    version. The sample-* modules are not published and not needed.
if [[ -f "$here/go.mod" && -f "$here/go.sum" ]] && grep -q "k8s.io/kubernetes $K8S_VERSION" "$here/go.mod"; then
	log "using the pinned module in tools/k8s (go.mod, go.sum)"
	cp "$here/go.mod" "$here/go.sum" "$work/"
else
	log "resolving k8s.io/kubernetes@$K8S_VERSION"
	gomod=$(cd "$work" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
	[[ -f "$gomod" ]] || die "cannot download k8s.io/kubernetes@$K8S_VERSION (module proxy unreachable?)"
	{
		echo "module meridian.local/k8s-tools"
		echo
		echo "go $(go env GOVERSION | sed 's/^go//; s/\.[0-9]*$//')"
		echo
		echo "require k8s.io/kubernetes $K8S_VERSION"
		echo
		grep -E '^[[:space:]]*k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" |
			awk '{print $1}' | grep -v '^k8s.io/sample-' | sort -u |
			while read -r m; do echo "replace $m => $m $STAGING_VERSION"; done
	} >"$work/go.mod"
	log "go.mod has $(grep -c '^replace' "$work/go.mod") staging replaces; running go mod tidy"
	(cd "$work" && go mod tidy) || die "go mod tidy failed in the throwaway module"
fi
# Keep a copy next to this script for reference (not used by the build).
cp "$work/go.mod" "$CACHE/go.mod"; cp "$work/go.sum" "$CACHE/go.sum"

# 2. Build the four binaries in one go build, so shared packages compile once.
ld="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=${K8S_VERSION#v1.}"
	ld+=" -X $p.gitTreeState=clean"
done
ld=$(echo "$ld" | sed -E 's/gitMinor=([0-9]+)\.[0-9]+/gitMinor=\1/g')
mkdir -p "$work/out"
log "building kube-apiserver, kube-controller-manager, kube-scheduler, etcd (cold: 15-20 min on 2 cores; time-box ${BUILD_TIMEOUT}s)"
(
	cd "$work"
	timeout "$BUILD_TIMEOUT" go build -trimpath -ldflags "$ld" -o out/ \
		k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler \
		go.etcd.io/etcd/server/v3
) &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
	sleep 30
	kill -0 "$pid" 2>/dev/null && log "still building... $(($(date +%s) - t0))s elapsed (time-box ${BUILD_TIMEOUT}s)"
done
wait "$pid" || die "go build failed or ran past ${BUILD_TIMEOUT}s"
mv "$work/out/server" "$work/out/etcd"
for b in kube-apiserver kube-controller-manager kube-scheduler etcd; do
	install -m 0755 "$work/out/$b" "$CACHE/bin/$b"
done

# 3. KWOK (no staging replaces, plain go install) and its stage files.
log "building kwok@$KWOK_VERSION"
GOBIN="$CACHE/bin" timeout "$BUILD_TIMEOUT" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" ||
	die "go install sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION failed"
kdir=$(cd "$work" && go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
[[ -d "$kdir/kustomize/stage" ]] || die "kwok stage files not found in $kdir"
{
	for f in "$kdir/kustomize/stage/node/fast/node-initialize.yaml" \
		"$kdir/kustomize/stage/node/heartbeat/node-heartbeat.yaml" \
		"$kdir"/kustomize/stage/pod/general/pod-*.yaml; do
		echo "---"
		grep -v '^---$' "$f"
	done
} >"$CACHE/kwok-stages.yaml"

echo "$STAMP_WANT" >"$CACHE/stamp"
log "done in $(($(date +%s) - t0))s: $(ls "$CACHE/bin" | tr '\n' ' ')"
