#!/usr/bin/env bash
# Build OpenTofu, which the Terraform provider's acceptance tests drive (the
# Terraform CLI cannot be installed from the Go module proxy), into a cache
# outside the repository, keyed by version:
#   ${MERIDIAN_TOFU_CACHE:-$HOME/.cache/meridian/tofu-$TOFU_VERSION}/bin/tofu
# A throwaway module requires github.com/opentofu/opentofu at the pinned
# version with the one replace its go.mod carries (a fork of hcl/v2). The
# build is skipped when the stamp matches: cold, about 30 minutes on 2 cores;
# warm, instant. Prints the binary's path on stdout.
# Exit codes: 0 built or cached; 4 impossible (no go, no module proxy,
# compile error, time-out).
set -euo pipefail

TOFU_VERSION=${TOFU_VERSION:-v1.12.6}
HCL_REPLACE="github.com/hashicorp/hcl/v2 v2.20.1 => github.com/opentofu/hcl/v2 v2.20.2-0.20251021132045-587d123c2828"
CACHE=${MERIDIAN_TOFU_CACHE:-$HOME/.cache/meridian/tofu-$TOFU_VERSION}
BUILD_TIMEOUT=${MERIDIAN_TOFU_BUILD_TIMEOUT:-3600}
STAMP_WANT="opentofu=$TOFU_VERSION"

log() { printf '[tofu-build %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 4; }

if [[ -x "$CACHE/bin/tofu" && -f "$CACHE/stamp" && "$(cat "$CACHE/stamp")" == "$STAMP_WANT" ]]; then
	printf '%s\n' "$CACHE/bin/tofu"
	exit 0
fi
command -v go >/dev/null || die "go is not installed"
mkdir -p "$CACHE/bin"
rm -f "$CACHE/stamp"
# One build at a time (two test packages may ask at once).
exec 9>>"$CACHE/build.lock"
if command -v flock >/dev/null; then
	flock 9
	if [[ -x "$CACHE/bin/tofu" && "$(cat "$CACHE/stamp" 2>/dev/null)" == "$STAMP_WANT" ]]; then
		printf '%s\n' "$CACHE/bin/tofu"
		exit 0
	fi
fi

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod
work=$(mktemp -d "${TMPDIR:-/tmp}/meridian-tofu-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
t0=$(date +%s)
cat >"$work/go.mod" <<MOD
module meridian.local/tofu-build

go $(go env GOVERSION | sed 's/^go//')

require github.com/opentofu/opentofu $TOFU_VERSION

replace $HCL_REPLACE
MOD
cat >"$work/tools.go" <<'GO'
//go:build tools

package tools

import _ "github.com/opentofu/opentofu/cmd/tofu"
GO
log "resolving github.com/opentofu/opentofu@$TOFU_VERSION (about 30 minutes cold on 2 cores; time-box ${BUILD_TIMEOUT}s)"
(cd "$work" && timeout "$BUILD_TIMEOUT" go mod tidy >&2) || die "go mod tidy failed (module proxy unreachable?)"
log "building cmd/tofu"
# Without optimisation or inlining (-gcflags=all=-N -l): tofu is only a
# test driver here (each acceptance step runs it for seconds), and that
# cuts about a quarter of the compile time, as for Vault (tools/vault).
(cd "$work" && timeout "$BUILD_TIMEOUT" go build -trimpath -gcflags='all=-N -l' \
	-ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" \
	-o "$CACHE/bin/tofu" github.com/opentofu/opentofu/cmd/tofu >&2) || die "go build of cmd/tofu failed or timed out"
"$CACHE/bin/tofu" version >&2 || die "the built tofu does not run"
echo "$STAMP_WANT" >"$CACHE/stamp"
log "built in $(($(date +%s) - t0))s: $CACHE/bin/tofu"
printf '%s\n' "$CACHE/bin/tofu"
