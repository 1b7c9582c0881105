#!/usr/bin/env bash
# promtool.sh prints the path of a promtool binary on stdout, installing
# Debian's `prometheus` package (which ships promtool) with apt-get when
# none is found and the script runs as root. It exits 1, with the reason
# on stderr, when promtool is missing and cannot be installed.
#
#   PROMTOOL   a promtool binary to use instead of searching
#
# Usage:
#   PROMTOOL="$(bash scripts/promtool.sh)" && "$PROMTOOL" check rules dashboards/prometheus/*.rules.yaml
set -euo pipefail

log() { printf 'promtool.sh: %s\n' "$*" >&2; }

if [ -n "${PROMTOOL:-}" ]; then
	if [ -x "$PROMTOOL" ]; then
		printf '%s\n' "$PROMTOOL"
		exit 0
	fi
	log "PROMTOOL=$PROMTOOL is not an executable file"
	exit 1
fi
if p="$(command -v promtool 2>/dev/null)"; then
	printf '%s\n' "$p"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	log "promtool is not installed and this is not root: install Debian's prometheus package (apt-get install prometheus) or set PROMTOOL"
	exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
	log "promtool is not installed and apt-get is missing: install a Prometheus release that ships promtool, or set PROMTOOL"
	exit 1
fi
log "installing Debian's prometheus package for promtool (apt-get)"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends prometheus >&2; then
	apt-get update >&2 && apt-get install -y --no-install-recommends prometheus >&2 || {
		log "apt-get could not install prometheus"
		exit 1
	}
fi
if p="$(command -v promtool 2>/dev/null)"; then
	printf '%s\n' "$p"
	exit 0
fi
log "the prometheus package is installed but promtool is not on PATH"
exit 1
