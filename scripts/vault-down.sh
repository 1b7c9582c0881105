#!/usr/bin/env bash
# vault-down.sh: stop the Vault dev server that vault-up.sh started, by the
# pid it recorded; nothing else is touched. Its data was in memory and is
# gone with it.
#
#   scripts/vault-down.sh           stop it, keep the state dir (log, env file)
#   scripts/vault-down.sh --purge   also delete the state dir (not the binary cache)
#
# Exit codes: 0 stopped (or nothing was running); 1 it would not stop.
set -euo pipefail
STATE=${MERIDIAN_VAULT_DIR:-$HOME/.cache/meridian/vault}
PIDF=$STATE/vault.pid
log() { printf 'vault-down: %s\n' "$*" >&2; }
rc=0
if [[ -f $PIDF ]]; then
	pid=$(cat "$PIDF")
	if kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.2
		done
		if kill -0 "$pid" 2>/dev/null; then
			kill -9 "$pid" 2>/dev/null || true
			sleep 0.5
		fi
		if kill -0 "$pid" 2>/dev/null; then
			log "vault (pid $pid) would not stop"
			rc=1
		else
			log "stopped vault (pid $pid)"
		fi
	fi
	[[ $rc == 0 ]] && rm -f "$PIDF" "$STATE/env"
else
	log "nothing to stop (no $PIDF)"
fi
if [[ ${1:-} == --purge && $rc == 0 ]]; then
	rm -rf "$STATE"
	log "deleted $STATE"
fi
exit $rc
