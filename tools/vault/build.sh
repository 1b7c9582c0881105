#!/usr/bin/env bash
# Build the Vault server that the tests use (scripts/vault-up.sh,
# internal/vaultlocal) into a cache outside the repository, keyed by version:
#   ${MERIDIAN_VAULT_CACHE:-$HOME/.cache/meridian/vault-$VAULT_VERSION}/bin/vault
# The build is skipped when the stamp matches. Prints the binary's path on
# stdout. Exit codes: 0 built or cached; 4 impossible (no go, no module proxy,
# compile error, time-out); 5 not cached and MERIDIAN_VAULT_NO_BUILD=1 (which
# only looks).
# Environment: MERIDIAN_VAULT_CACHE (the cache above), MERIDIAN_VAULT_BUILD_TIMEOUT
# (seconds for each step, default 3600), MERIDIAN_VAULT_NO_BUILD=1 (see exit 5).
#
# Vault is BUSL-licensed: it is a TEST DEPENDENCY ONLY. It runs as a local dev
# server for tests; it never goes into an image, a chart or a release
# artifact, and the project's own go.mod requires only its MPL-2.0 client
# (github.com/hashicorp/vault/api).
#
# How, and why this way (cold build on 2 cores):
#   * tools/vault/go.mod and go.sum pin the module graph (vault v1.21.0 and
#     vault-plugin-auth-kubernetes v0.23.0), so the build downloads only the
#     modules it compiles instead of the ~1 GB a `go mod tidy` of
#     github.com/hashicorp/vault fetches.
#   * It builds Vault's own main (github.com/hashicorp/vault, the real
#     `vault server -dev`) with Vault's own `minimal` build tag (its
#     Makefile's BUILD_MINIMAL): the core server with the token, approle,
#     cert, jwt/oidc and userpass auth methods and the kv, pki, ssh and
#     transit secrets engines, the inmem/file/raft storage backends, and
#     without the cloud auth methods, database plugins and other storage
#     backends. That takes the compiled Go source from 323 MB (2,576
#     packages) to 143 MB (1,906 packages).
#   * The minimal registry has no Kubernetes auth method, which spoke
#     identity needs, so the module is copied into the throwaway directory
#     (replace => ./vault) and the minimal registry's one hook,
#     extendAddonPlugins in helper/builtinplugins/registry_min.go, is
#     rewritten to register vault-plugin-auth-kubernetes. (go build -overlay
#     refuses files in the module cache, hence the copy: ~60 MB, seconds.)
#   * It compiles without optimisation or inlining (-gcflags='all=-N -l'):
#     the server is only a test fixture, and that cuts a quarter of the
#     compile time (measured below).
#   * A custom main that runs vault.NewCore on the inmem backend behind
#     vault/http was measured and not taken: the core package itself imports
#     go-discover (the cloud auto-join providers), the KMS seal wrappers and
#     the Okta SDK, so it still compiles 1,677 packages / 132 MB of source
#     (65% of the packages, 8% less source than the minimal main) and would
#     have to copy the dev-mode bootstrap of command/server.go.
#   Measured cold on a shared 2-core machine (empty GOCACHE, modules already
#   downloaded, nice 19, load average 5-17, mean 12, beside others' fuzzers
#   and benchmarks):
#     minimal, optimised (go build's default): 2,054 s wall (34 min),
#       1,255 CPU-seconds (user+sys) of go build and its compilers; on an
#       idle 2-core machine
#       that is an estimated 11-12 min (CPU-seconds over 2 cores, plus the
#       link).
#     module download for it (empty GOMODCACHE, pinned go.sum): 175 s,
#       486 MB of zips (a go mod tidy of the full module fetches ~1 GB).
#     full `vault` main (no tag, unpatched): the packages it adds to the
#       minimal set, built on top of the minimal build's cache, took another
#       1,080 s wall (load 3-12) and 1,048 CPU-seconds, and its link needed
#       4.6 GB of memory for a 361 MB binary (minimal: 139 MB). So cold it is
#       about 2,300 CPU-seconds, about 52 min wall on that machine and about
#       20 min idle: the minimal build costs 55% of it.
#     minimal with -gcflags='all=-N -l' (this script: no optimisation and
#       no inlining, as a debugger's build; Vault serves the same API, and
#       internal/vaultlocal's tests take the same time): 1,045 s wall at load
#       average 6-9 (mean 8), 935 CPU-seconds (705 user, 229 sys): 25% less
#       CPU than the optimised minimal build (part of that may be the lighter
#       load), an estimated 8-9 min on an idle 2-core machine; binary 166 MB.
#   With CI's cold run at about 72 min before Vault, this build (about 3 min
#   of download and 8-9 min of build on an idle machine) fits the 90
#   minutes; the full one would not.
set -euo pipefail

VAULT_VERSION=${VAULT_VERSION:-v1.21.0}
KUBE_AUTH_VERSION=v0.23.0 # vault-plugin-auth-kubernetes, as pinned in tools/vault/go.mod
CACHE=${MERIDIAN_VAULT_CACHE:-$HOME/.cache/meridian/vault-$VAULT_VERSION}
BUILD_TIMEOUT=${MERIDIAN_VAULT_BUILD_TIMEOUT:-3600}
GCFLAGS="all=-N -l" # no optimisation, no inlining: a quarter less compile time (see above)
STAMP_WANT="vault=$VAULT_VERSION tags=minimal auth-kubernetes=$KUBE_AUTH_VERSION gcflags=$GCFLAGS"

here=$(cd "$(dirname "$0")" && pwd)
log() { printf '[vault-build %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 4; }

cached() { [[ -x "$CACHE/bin/vault" && -f "$CACHE/stamp" && "$(cat "$CACHE/stamp")" == "$STAMP_WANT" ]]; }
if cached; then
	printf '%s\n' "$CACHE/bin/vault"
	exit 0
fi
if [[ ${MERIDIAN_VAULT_NO_BUILD:-0} == 1 ]]; then
	log "not built: no vault with stamp \"$STAMP_WANT\" in $CACHE, and MERIDIAN_VAULT_NO_BUILD=1"
	exit 5
fi
command -v go >/dev/null || die "go is not installed"
mkdir -p "$CACHE/bin"
# One build at a time (two test packages, or CI and a developer, may ask at once).
exec 9>>"$CACHE/build.lock"
if command -v flock >/dev/null; then
	flock -w "$((BUILD_TIMEOUT + 300))" 9 || die "another build holds $CACHE/build.lock"
	if cached; then
		printf '%s\n' "$CACHE/bin/vault"
		exit 0
	fi
fi
rm -f "$CACHE/stamp"

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod
work=$(mktemp -d "${TMPDIR:-/tmp}/meridian-vault-build.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
t0=$(date +%s)

# 1. The throwaway module: the pinned go.mod/go.sum when they name this
#    version, else resolved afresh (slow: go mod tidy fetches ~1 GB).
cp "$here/tools.go" "$work/tools.go"
if [[ -f "$here/go.mod" && -f "$here/go.sum" ]] && grep -q "github.com/hashicorp/vault $VAULT_VERSION" "$here/go.mod"; then
	log "using the pinned module in tools/vault (go.mod, go.sum)"
	cp "$here/go.mod" "$here/go.sum" "$work/"
else
	log "resolving github.com/hashicorp/vault@$VAULT_VERSION (go mod tidy, several minutes)"
	cat >"$work/go.mod" <<MOD
module meridian.local/vault-tools

go $(go env GOVERSION | sed 's/^go//')

require (
	github.com/hashicorp/vault $VAULT_VERSION
	github.com/hashicorp/vault-plugin-auth-kubernetes $KUBE_AUTH_VERSION
)
MOD
	(cd "$work" && timeout "$BUILD_TIMEOUT" go mod tidy >&2) || die "go mod tidy failed (module proxy unreachable?)"
fi

# 2. A copy of the vault module with the minimal registry's hook registering
#    the Kubernetes auth method.
vdir=$(cd "$work" && go mod download -json "github.com/hashicorp/vault@$VAULT_VERSION" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
[[ -f "$vdir/helper/builtinplugins/registry_min.go" ]] ||
	die "cannot download github.com/hashicorp/vault@$VAULT_VERSION (module proxy unreachable?)"
mkdir "$work/vault"
(cd "$vdir" && tar --exclude=./ui --exclude=./website --exclude=./enos -cf - .) | tar -xf - -C "$work/vault"
chmod -R u+w "$work/vault"
grep -q 'func extendAddonPlugins(_ \*registry)' "$work/vault/helper/builtinplugins/registry_min.go" ||
	die "helper/builtinplugins/registry_min.go of vault $VAULT_VERSION is not the expected no-op hook"
cat >"$work/vault/helper/builtinplugins/registry_min.go" <<'GO'
//go:build minimal

package builtinplugins

import credKube "github.com/hashicorp/vault-plugin-auth-kubernetes"

// extendAddonPlugins (rewritten by Meridian's tools/vault/build.sh) adds
// the Kubernetes auth method to Vault's minimal build.
func extendAddonPlugins(r *registry) {
	r.credentialBackends["kubernetes"] = credentialBackend{Factory: credKube.Factory}
}
GO
(cd "$work" && go mod edit -replace "github.com/hashicorp/vault=./vault") || die "go mod edit failed"

# 3. Build (one go build; its progress every minute, as it is long and quiet).
log "building vault $VAULT_VERSION -tags minimal -gcflags='$GCFLAGS' (cold: see tools/vault/build.sh; time-box ${BUILD_TIMEOUT}s)"
(
	cd "$work"
	timeout "$BUILD_TIMEOUT" go build -trimpath -tags minimal -gcflags="$GCFLAGS" \
		-ldflags "-s -w -X github.com/hashicorp/vault/version.GitCommit=meridian-test-build" \
		-o "$work/vault.bin" github.com/hashicorp/vault >&2
) &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
	for _ in $(seq 1 60); do
		sleep 1
		kill -0 "$pid" 2>/dev/null || break
	done
	kill -0 "$pid" 2>/dev/null && log "still building... $(($(date +%s) - t0))s elapsed (time-box ${BUILD_TIMEOUT}s)"
done
wait "$pid" || die "go build of github.com/hashicorp/vault failed or ran past ${BUILD_TIMEOUT}s"
"$work/vault.bin" version >&2 || die "the built vault does not run"
install -m 0755 "$work/vault.bin" "$CACHE/bin/vault"
echo "$STAMP_WANT" >"$CACHE/stamp"
log "built in $(($(date +%s) - t0))s: $CACHE/bin/vault"
printf '%s\n' "$CACHE/bin/vault"
