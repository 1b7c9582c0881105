#!/usr/bin/env bash
# vault-up.sh: start a real Vault server in dev mode on loopback, for the
# tests of spoke identity and secrets and for trying them by hand:
#
#   vault server -dev -dev-root-token-id=root -dev-listen-address=127.0.0.1:PORT
#
# in-memory storage, already initialised and unsealed, KV v2 at secret/,
# root token "root" (MERIDIAN_VAULT_TOKEN to change it). PORT is 18200 when
# it and 18201 (Vault's cluster port, always the next one) are free, else a
# free pair; MERIDIAN_VAULT_PORT picks it. Everything is lost when it stops.
#
# Vault is BUSL-licensed: a TEST DEPENDENCY ONLY, never in an image, a chart
# or a release artifact. The binary is built once from the Go module proxy
# (tools/vault/build.sh) into a cache keyed by version,
#   ${MERIDIAN_VAULT_CACHE:-$HOME/.cache/meridian/vault-v1.21.0}/bin/vault
# (MERIDIAN_VAULT_BIN names another), and the build is skipped when its
# stamp matches (cold: see tools/vault/build.sh; warm: instant). Runtime
# state (log, pid, env file) lives in
#   ${MERIDIAN_VAULT_DIR:-$HOME/.cache/meridian/vault}
# never in the repository. Source "$MERIDIAN_VAULT_DIR/env" to reach it
# (VAULT_ADDR, VAULT_TOKEN, MERIDIAN_VAULT_ADDR, MERIDIAN_VAULT_TOKEN,
# MERIDIAN_VAULT_BIN); the server's log is "$MERIDIAN_VAULT_DIR/vault.log".
#
# Idempotent: when the recorded server still answers /v1/sys/health, it
# only says so. One run at a time (an flock on $MERIDIAN_VAULT_DIR/vault-up.lock).
# Needs no root. scripts/vault-down.sh stops it.
#
# Environment:
#   MERIDIAN_VAULT_BIN       the vault binary (default: the cache above, built when missing)
#   MERIDIAN_VAULT_CACHE     binary cache (see above)
#   MERIDIAN_VAULT_DIR       state dir (see above)
#   MERIDIAN_VAULT_PORT      the API port (default 18200, else a free one)
#   MERIDIAN_VAULT_TOKEN     the root token (default root)
#   MERIDIAN_VAULT_NO_BUILD  1: never build; exit 5 when the binary is missing
#
# Exit codes: 0 ready; 1 start failure; 4 build impossible (no go, no module
# proxy, compile error, time-out); 5 not built and MERIDIAN_VAULT_NO_BUILD=1.
set -euo pipefail

EXIT_BUILD=4 EXIT_NOT_BUILT=5
here=$(cd "$(dirname "$0")" && pwd)
STATE=${MERIDIAN_VAULT_DIR:-$HOME/.cache/meridian/vault}
TOKEN=${MERIDIAN_VAULT_TOKEN:-root}
ENV=$STATE/env
PIDF=$STATE/vault.pid
LOG=$STATE/vault.log

log() { printf 'vault-up: %s\n' "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}
command -v curl >/dev/null || die "curl is required"
mkdir -p "$STATE"
chmod 700 "$STATE"

if command -v flock >/dev/null; then
	exec 9>>"$STATE/vault-up.lock"
	flock -w 3900 9 || die "another vault-up.sh holds $STATE/vault-up.lock"
fi

alive() { [[ -f $PIDF ]] && kill -0 "$(cat "$PIDF")" 2>/dev/null; }
health() { # prints the HTTP code of /v1/sys/health (200: initialised, unsealed, active)
	curl -s --max-time 3 -o /dev/null -w '%{http_code}' "$1/v1/sys/health" 2>/dev/null || true
}

# 1. Already running?
if [[ -f $ENV ]] && alive; then
	# shellcheck disable=SC1090
	source "$ENV"
	if [[ $(health "$MERIDIAN_VAULT_ADDR") == 200 ]]; then
		log "already running at $MERIDIAN_VAULT_ADDR (pid $(cat "$PIDF")); source $ENV"
		exit 0
	fi
fi
if alive; then # recorded but not answering: stop it (ours, by pid)
	pid=$(cat "$PIDF")
	log "vault (pid $pid) does not answer; restarting it"
	kill "$pid" 2>/dev/null || true
	for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
	kill -9 "$pid" 2>/dev/null || true
fi
rm -f "$PIDF"

# 2. The binary: MERIDIAN_VAULT_BIN, else the cached build (built now when
#    missing, unless MERIDIAN_VAULT_NO_BUILD=1).
BIN=${MERIDIAN_VAULT_BIN:-}
if [[ -z $BIN ]]; then
	[[ ${MERIDIAN_VAULT_NO_BUILD:-0} == 1 ]] || log "finding or building vault (tools/vault/build.sh; the cold build is long, see its header)"
	rc=0
	BIN=$(nice -n 10 bash "$here/../tools/vault/build.sh" 9>&-) || rc=$?
	case $rc in
	0) ;;
	5)
		log "NOT BUILT: vault is not in the cache and MERIDIAN_VAULT_NO_BUILD=1 (run bash tools/vault/build.sh once)"
		exit $EXIT_NOT_BUILT
		;;
	*)
		log "**********************************************************************"
		log "BUILD IMPOSSIBLE: tools/vault/build.sh failed (see its output above)."
		log "**********************************************************************"
		exit $EXIT_BUILD
		;;
	esac
fi
[[ -x $BIN ]] || die "vault binary $BIN is not executable"

# 3. A port: PORT and PORT+1 (the cluster listener) free on loopback.
free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
PORT=${MERIDIAN_VAULT_PORT:-}
if [[ -z $PORT ]]; then
	if free 18200 && free 18201; then
		PORT=18200
	else
		for _ in $(seq 1 200); do
			# Below the kernel's ephemeral range (32768 and up by
			# default), whose ports a connect test cannot see in use.
			p=$((20000 + RANDOM % 12000))
			if free "$p" && free $((p + 1)); then PORT=$p; break; fi
		done
	fi
	[[ -n $PORT ]] || die "no free port pair found on 127.0.0.1"
fi
ADDR=http://127.0.0.1:$PORT

# 4. Start it in its own session, detached from this script's lock, without
#    the caller's VAULT_* variables (a VAULT_CLUSTER_ADDR would change it).
: >"$LOG"
env -u VAULT_ADDR -u VAULT_TOKEN -u VAULT_CLUSTER_ADDR -u VAULT_API_ADDR -u VAULT_DEV_ROOT_TOKEN_ID \
	-u VAULT_DEV_LISTEN_ADDRESS setsid "$BIN" server -dev -dev-root-token-id="$TOKEN" \
	-dev-listen-address="127.0.0.1:$PORT" -dev-no-store-token \
	>>"$LOG" 2>&1 </dev/null 9>&- &
echo $! >"$PIDF"
log "started vault (pid $!) at $ADDR; log $LOG"
for i in $(seq 1 300); do
	[[ $(health "$ADDR") == 200 ]] && break
	alive || die "vault exited; see $LOG: $(tail -5 "$LOG")"
	[[ $i == 300 ]] && die "vault did not answer /v1/sys/health in 60s; see $LOG"
	sleep 0.2
done
cat >"$ENV" <<EV
# written by scripts/vault-up.sh; source it to reach the local Vault dev server
export VAULT_ADDR=$ADDR
export VAULT_TOKEN=$TOKEN
export MERIDIAN_VAULT_ADDR=$ADDR
export MERIDIAN_VAULT_TOKEN=$TOKEN
export MERIDIAN_VAULT_BIN=$BIN
export MERIDIAN_VAULT_DIR=$STATE
EV
chmod 600 "$ENV"
log "ready at $ADDR (root token in $ENV); source $ENV"
