#!/usr/bin/env bash
# slurm-down.sh: stop the local Slurm cluster that slurm-up.sh started.
#
# Idempotent: stops slurmrestd, the four slurmd and slurmctld by the pid files
# in the state dir (${MERIDIAN_SLURM_DIR:-$HOME/.cache/meridian/slurm}); it
# never kills daemons by name. munged is left running (it is the host's).
# With --purge it also removes the state dir (configs, spool, logs, env file).
#
# Exit codes: 0 done; 1 failure; 3 not root.
set -euo pipefail

STATE=${MERIDIAN_SLURM_DIR:-$HOME/.cache/meridian/slurm}
purge=0
[[ ${1:-} == --purge ]] && purge=1
log() { printf 'slurm-down: %s\n' "$*" >&2; }

if [[ $(id -u) -ne 0 ]]; then
	log "NOT RUNNING AS ROOT: the local Slurm daemons run as root; nothing stopped"
	exit 3
fi

stop_pidfile() { # stop_pidfile <file> <name>
	local f=$1 name=$2 pid
	[[ -s $f ]] || return 0
	pid=$(cat "$f")
	if kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			log "$name (pid $pid) ignored SIGTERM; sending SIGKILL"
			kill -9 "$pid" 2>/dev/null || true
		fi
		log "stopped $name (pid $pid)"
	fi
	rm -f "$f"
}

if [[ -d $STATE/run ]]; then
	stop_pidfile "$STATE/run/slurmrestd.pid" slurmrestd
	for f in "$STATE"/run/slurmd-*.pid; do
		[[ -e $f ]] || continue
		n=${f##*/slurmd-}
		stop_pidfile "$f" "slurmd ${n%.pid}"
	done
	stop_pidfile "$STATE/run/slurmctld.pid" slurmctld
fi
if ((purge)); then
	rm -rf "$STATE"
	log "removed $STATE"
fi
log "done"
