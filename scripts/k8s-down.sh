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
declare -A pids=()
for n in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
	f=$STATE/pids/$n
	[[ -f $f ]] || continue
	pid=$(cat "$f")
	if kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true
		kill -CONT "$pid" 2>/dev/null || true # a frozen (SIGSTOP) process must run to exit
		pids[$n]=$pid
	else
		rm -f "$f"
	fi
done
# SIGTERM to all at once, then up to 10s for them to exit, then SIGKILL.
for _ in $(seq 1 50); do
	left=0
	for n in "${!pids[@]}"; do kill -0 "${pids[$n]}" 2>/dev/null && left=1; done
	[[ $left == 0 ]] && break
	sleep 0.2
done
rc=0
for n in "${!pids[@]}"; do
	pid=${pids[$n]}
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
	rm -f "$STATE/pids/$n"
done
if [[ ${1:-} == --purge && $rc == 0 ]]; then
	rm -rf "$STATE"
	log "deleted $STATE"
fi
exit $rc
