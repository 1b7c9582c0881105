#!/usr/bin/env bash
# k8s-down.sh: stop the local Kubernetes control plane that k8s-up.sh
# started (kwok, scheduler, controller-manager, apiserver, etcd), by the
# pids it recorded; nothing else is touched.
#
#   scripts/k8s-down.sh           stop the processes, keep state (etcd data, certs)
#   scripts/k8s-down.sh --purge   also delete the state dir (not the binary cache)
#
# Exit codes: 0 stopped (or nothing was running); 1 a process would not stop.
set -euo pipefail
STATE=${MERIDIAN_K8S_DIR:-$HOME/.cache/meridian/k8s}
log() { printf 'k8s-down: %s\n' "$*" >&2; }
rc=0
for n in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
	f=$STATE/pids/$n
	[[ -f $f ]] || continue
	pid=$(cat "$f")
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
			log "$n (pid $pid) would not stop"
			rc=1
			continue
		fi
		log "stopped $n (pid $pid)"
	fi
	rm -f "$f"
done
if [[ ${1:-} == --purge && $rc == 0 ]]; then
	rm -rf "$STATE"
	log "deleted $STATE"
fi
exit $rc
