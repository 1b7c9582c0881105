#!/usr/bin/env bash
# helm.sh installs the pinned Helm CLI into a cache directory outside the
# repository when it is missing, then prints the binary's path on stdout.
#
#   MERIDIAN_TOOLS   cache directory (default: $HOME/.cache/meridian/tools)
#
# The binary is built with `go install` at a pinned version, so it needs only
# the Go toolchain and the Go module proxy. A cold build takes 2-3 minutes on
# two cores (148 s with an empty build cache), longer on a busy machine
# (Helm pulls in a large part of the Kubernetes libraries); later runs only
# check the version stamp and print the path.
#
# Usage from other scripts or the shell:
#   HELM="$(bash scripts/helm.sh)" && "$HELM" version
set -euo pipefail

HELM_VERSION="v3.22.0"
TOOLS_DIR="${MERIDIAN_TOOLS:-$HOME/.cache/meridian/tools}"
BIN_DIR="$TOOLS_DIR/bin"
STAMP="$BIN_DIR/.helm.version"
mkdir -p "$BIN_DIR"

log() { printf 'helm.sh: %s\n' "$*" >&2; }

if [ -x "$BIN_DIR/helm" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$HELM_VERSION" ]; then
	log "helm $HELM_VERSION present"
	printf '%s\n' "$BIN_DIR/helm"
	exit 0
fi

if ! command -v go >/dev/null 2>&1; then
	log "the Go toolchain is needed to build helm $HELM_VERSION and was not found on PATH"
	exit 1
fi

log "building helm $HELM_VERSION with go install (several minutes when cold)"
start=$(date +%s)
# Build outside the repository so its go.mod and GOFLAGS do not apply; the
# toolchain must not switch versions on its own either.
(
	cd "$TOOLS_DIR"
	GOBIN="$BIN_DIR" GOFLAGS=-buildvcs=false GOTOOLCHAIN=local \
		go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
)
printf '%s\n' "$HELM_VERSION" >"$STAMP"
log "helm $HELM_VERSION installed in $(( $(date +%s) - start ))s"
printf '%s\n' "$BIN_DIR/helm"
