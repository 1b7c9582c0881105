#!/usr/bin/env bash
# k8s-up.sh: start a real, loopback-only Kubernetes control plane on this
# host for Meridian's Kubernetes connector tests and demo:
#
#   etcd, kube-apiserver (token auth, RBAC), kube-controller-manager,
#   kube-scheduler and KWOK (which plays the kubelets), plus three fake GPU
#   nodes with GPU Feature Discovery labels:
#     gpu-h100-0, gpu-h100-1  8x NVIDIA-H100-80GB-HBM3, rack-a, NVLink clique A
#     gpu-a100-mig            4 whole A100-80GB + 2 MIG GPUs (14x nvidia.com/mig-1g.10gb), rack-b
#
# The binaries are built once from the Go module proxy (tools/k8s/build.sh)
# into a cache keyed by version,
#   ${MERIDIAN_K8S_CACHE:-$HOME/.cache/meridian/k8s-v1.37.2}
# and the build is skipped when its stamp matches (cold: 15-20 min on 2
# cores; warm: instant). Runtime state (certs, etcd data, logs, pids, the
# kubeconfig and the env file) lives in
#   ${MERIDIAN_K8S_DIR:-$HOME/.cache/meridian/k8s}
# never in the repository. Source "$MERIDIAN_K8S_DIR/env" to reach it
# (KUBECONFIG, MERIDIAN_KUBECONFIG, MERIDIAN_K8S_SERVER, MERIDIAN_K8S_TOKEN).
#
# Idempotent: when the apiserver already answers, it only (re)applies the
# nodes (uncordoned) and exits. Every port is on 127.0.0.1, picked free at
# first start and kept in the env file.
#
# One run at a time: a run holds an flock on $MERIDIAN_K8S_CACHE/k8s-up.lock
# from the build to the nodes, so two concurrent cold starts (two test
# packages) neither build twice nor start two control planes; the second
# waits (up to the build time-out plus 5 min) and then finds everything up.
# With MERIDIAN_K8S_NO_BUILD=1 it does not wait for a run that is building:
# it exits 5 at once.
#
# Environment:
#   MERIDIAN_K8S_CACHE     binary cache (see above)
#   MERIDIAN_K8S_DIR       state dir (see above)
#   MERIDIAN_K8S_NO_BUILD  1: never build; exit 5 when the binaries are missing
#   MERIDIAN_K8S_BUILD_TIMEOUT  seconds for the cold build (default 2400)
#
# Exit codes: 0 ready; 1 start failure; 3 not root (nothing was done);
# 4 build impossible (no go, no module proxy, compile error, time-out);
# 5 not built and MERIDIAN_K8S_NO_BUILD=1.
set -euo pipefail

EXIT_NOT_ROOT=3 EXIT_BUILD=4 EXIT_NOT_BUILT=5
K8S_VERSION=v1.37.2
here=$(cd "$(dirname "$0")" && pwd)
ARGS=("$@")
export MERIDIAN_K8S_CACHE=${MERIDIAN_K8S_CACHE:-$HOME/.cache/meridian/k8s-$K8S_VERSION}
CACHE=$MERIDIAN_K8S_CACHE
BIN=$CACHE/bin
STATE=${MERIDIAN_K8S_DIR:-$HOME/.cache/meridian/k8s}
T0=$(date +%s.%N)

log() { printf 'k8s-up: %s\n' "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

# exited NAME: a component died while starting. free_port only checks that
# nothing listens on a port, so another process (a test's server) can bind
# it before the component does: that is no error of ours, so start again,
# from the top, on fresh ports (three tries in all).
exited() {
	local try=${MERIDIAN_K8S_UP_TRY:-1}
	if grep -q "address already in use" "$STATE/logs/$1.log" 2>/dev/null && ((try < 3)); then
		log "$1 could not bind its port (another process took it); starting again on fresh ports (try $((try + 1)) of 3)"
		exec 9>&-
		MERIDIAN_K8S_UP_TRY=$((try + 1)) exec bash "$0" "${ARGS[@]}"
	fi
	die "$1 exited; see $STATE/logs/$1.log"
}
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

if [[ $(id -u) != 0 ]]; then
	log "**********************************************************************"
	log "NOT ROOT: the local Kubernetes control plane is started only as root"
	log "(it runs system daemons on loopback). Nothing was done."
	log "**********************************************************************"
	exit $EXIT_NOT_ROOT
fi
for t in curl openssl; do command -v $t >/dev/null || die "$t is required"; done

built() { [[ -f $CACHE/stamp && -x $BIN/kube-apiserver && -x $BIN/kwok ]]; }

# 0. The lock (see the header). fd 9 stays open until exit; the daemons
# started below must not inherit it (start closes it for them).
mkdir -p "$CACHE"
LOCK=$CACHE/k8s-up.lock
LOCK_WAIT=$((${MERIDIAN_K8S_BUILD_TIMEOUT:-2400} + 300))
if command -v flock >/dev/null; then
	exec 9>>"$LOCK"
	if ! flock -n 9; then
		if [[ ${MERIDIAN_K8S_NO_BUILD:-0} == 1 ]] && ! built; then
			log "NOT BUILT: another k8s-up.sh holds $LOCK and the binaries are not in $CACHE yet; MERIDIAN_K8S_NO_BUILD=1, not waiting"
			exit $EXIT_NOT_BUILT
		fi
		log "another k8s-up.sh holds $LOCK; waiting for it (up to ${LOCK_WAIT}s)"
		flock -w "$LOCK_WAIT" 9 || die "$LOCK still held after ${LOCK_WAIT}s"
		log "lock acquired after $(elapsed)s"
	fi
else
	log "WARNING: flock not found: running without the lock (concurrent starts may collide)"
fi

# 1. Binaries (built once, cached by version).
if ! built; then
	if [[ ${MERIDIAN_K8S_NO_BUILD:-0} == 1 ]]; then
		log "NOT BUILT: no binaries in $CACHE and MERIDIAN_K8S_NO_BUILD=1 (run scripts/k8s-up.sh once to build them)"
		exit $EXIT_NOT_BUILT
	fi
	log "building the control plane into $CACHE (cold build: 15-20 min on 2 cores)"
	if ! nice -n 10 bash "$here/../tools/k8s/build.sh" 9>&-; then
		log "**********************************************************************"
		log "BUILD IMPOSSIBLE: tools/k8s/build.sh failed (see its output above)."
		log "**********************************************************************"
		exit $EXIT_BUILD
	fi
fi
bash "$here/../tools/k8s/build.sh" >/dev/null 2>&1 9>&- || { log "stamp mismatch after build"; exit $EXIT_BUILD; }

mkdir -p "$STATE"/{logs,pids,certs}
chmod 700 "$STATE"
ENV=$STATE/env

# free_port picks a port nothing listens on, from 20000-31999: below the
# kernel's ephemeral range (32768 and up by default), where outgoing
# connections take local ports that a connect test cannot see.
free_port() {
	local p
	for _ in $(seq 1 200); do
		p=$((20000 + RANDOM % 12000))
		if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	die "no free port found"
}

api() { # api METHOD PATH [BODY] [CONTENT-TYPE]: prints the HTTP code, body in $STATE/last.json
	curl -sk --max-time 10 -o "$STATE/last.json" -w '%{http_code}' -X "$1" \
		-H "Authorization: Bearer $TOKEN" -H "Content-Type: ${4:-application/json}" \
		${3:+--data-binary "$3"} "$SERVER$2" || echo 000
}

alive() { [[ -f $STATE/pids/$1 ]] && kill -0 "$(cat "$STATE/pids/$1")" 2>/dev/null; }

start() { # start NAME ARGS...: runs the binary in its own session, logs and pid in STATE
	local name=$1
	shift
	if alive "$name"; then
		log "$name already running (pid $(cat "$STATE/pids/$name"))"
		return
	fi
	setsid "$BIN/$name" "$@" >"$STATE/logs/$name.log" 2>&1 </dev/null 9>&- &
	echo $! >"$STATE/pids/$name"
	log "started $name (pid $!)"
}

# A test may hold the apiserver frozen (SIGSTOP) on purpose for a few
# seconds, leaving $STATE/frozen while it does. Wait for it rather than
# take the silence for a dead control plane and restart it under the test.
# A marker older than two minutes is a test that died: thaw and go on.
wait_unfrozen() {
	[[ -f $STATE/frozen ]] || return 0
	log "a test holds the apiserver frozen on purpose; waiting for it to resume"
	for _ in $(seq 1 120); do
		[[ -f $STATE/frozen ]] || break
		if [[ -n $(find "$STATE/frozen" -mmin +2 2>/dev/null) ]]; then
			log "a stale freeze marker (over 2 minutes old): resuming the apiserver"
			kill -CONT "$(cat "$STATE/frozen")" 2>/dev/null || true
			rm -f "$STATE/frozen"
			break
		fi
		sleep 1
	done
}

control_plane_up() {
	[[ $(curl -sk --max-time 5 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "$SERVER/readyz" || true) == 200 ]] &&
		alive kube-controller-manager && alive kube-scheduler && alive kwok
}

wait_unfrozen
running=0
if [[ -f $ENV ]]; then
	# shellcheck disable=SC1090
	source "$ENV"
	SERVER=$MERIDIAN_K8S_SERVER TOKEN=$MERIDIAN_K8S_TOKEN
	# A test may freeze the apiserver while the probe waits for it: a
	# failed probe is asked again once no test holds it frozen, rather
	# than taken at once for a dead control plane (which would be
	# restarted, thawing the apiserver under the test).
	if control_plane_up || { wait_unfrozen && control_plane_up; }; then
		running=1
		log "already running at $SERVER"
	fi
fi

if [[ $running == 0 ]]; then
	# Stop leftovers of an earlier, half-started run (by pid, ours only).
	for n in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
		# SIGCONT first: a test may have left it frozen (SIGSTOP).
		if alive $n; then kill -CONT "$(cat "$STATE/pids/$n")" 2>/dev/null || true; kill "$(cat "$STATE/pids/$n")" 2>/dev/null || true; fi
		rm -f "$STATE/pids/$n"
	done
	sleep 1
	ETCD_PORT=$(free_port) ETCD_PEER=$(free_port) API_PORT=$(free_port)
	KCM_PORT=$(free_port) SCHED_PORT=$(free_port) KWOK_PORT=$(free_port)
	SERVER=https://127.0.0.1:$API_PORT
	TOKEN=${MERIDIAN_K8S_TOKEN:-$(openssl rand -hex 24)}
	C=$STATE/certs
	[[ -f $C/sa.key ]] || openssl genrsa -out "$C/sa.key" 2048 2>/dev/null
	openssl rsa -in "$C/sa.key" -pubout -out "$C/sa.pub" 2>/dev/null
	printf '%s,admin,admin,system:masters\n' "$TOKEN" >"$C/tokens.csv"
	chmod 600 "$C"/*
	cat >"$STATE/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: meridian-local
  cluster:
    server: $SERVER
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: $TOKEN
contexts:
- name: meridian-local
  context: {cluster: meridian-local, user: admin, namespace: default}
current-context: meridian-local
KC
	chmod 600 "$STATE/kubeconfig"
	cat >"$ENV" <<EV
# written by scripts/k8s-up.sh; source it to reach the local Kubernetes
export KUBECONFIG=$STATE/kubeconfig
export MERIDIAN_KUBECONFIG=$STATE/kubeconfig
export MERIDIAN_K8S_SERVER=$SERVER
export MERIDIAN_K8S_TOKEN=$TOKEN
export MERIDIAN_K8S_CACHE=$CACHE
export MERIDIAN_K8S_DIR=$STATE
export MERIDIAN_K8S_PORTS="etcd=$ETCD_PORT apiserver=$API_PORT controller-manager=$KCM_PORT scheduler=$SCHED_PORT kwok=$KWOK_PORT"
EV
	chmod 600 "$ENV"

	start etcd --name meridian --data-dir "$STATE/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" \
		--initial-cluster "meridian=http://127.0.0.1:$ETCD_PEER" --unsafe-no-fsync=true --log-level=warn
	for _ in $(seq 1 100); do
		curl -s --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q true && break
		alive etcd || exited etcd
		sleep 0.2
	done
	start kube-apiserver --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
		--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --endpoint-reconciler-type=none \
		--secure-port="$API_PORT" --cert-dir="$C" --token-auth-file="$C/tokens.csv" \
		--authorization-mode=Node,RBAC --service-account-issuer="$SERVER" \
		--service-account-key-file="$C/sa.pub" --service-account-signing-key-file="$C/sa.key" \
		--service-cluster-ip-range=10.0.0.0/24 --allow-privileged=true
	for i in $(seq 1 300); do
		[[ $(api GET /readyz) == 200 ]] && break
		alive kube-apiserver || exited kube-apiserver
		[[ $i == 300 ]] && die "kube-apiserver not ready after 60s; see $STATE/logs/kube-apiserver.log"
		sleep 0.2
	done
	log "kube-apiserver ready at $SERVER after $(elapsed)s"
	start kube-controller-manager --kubeconfig="$STATE/kubeconfig" --leader-elect=false \
		--bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
		--service-account-private-key-file="$C/sa.key" --root-ca-file="$C/apiserver.crt" \
		--use-service-account-credentials=false \
		--controllers='*,-node-ipam-controller,-kube-apiserver-serving-clustertrustbundle-publisher-controller'
	start kube-scheduler --kubeconfig="$STATE/kubeconfig" --leader-elect=false \
		--bind-address=127.0.0.1 --secure-port="$SCHED_PORT"
	start kwok --kubeconfig="$STATE/kubeconfig" --manage-all-nodes=true \
		--config="$CACHE/kwok-stages.yaml" --server-address="127.0.0.1:$KWOK_PORT" \
		--node-ip=127.0.0.1 --cidr=10.0.0.0/24
	for i in $(seq 1 300); do
		[[ $(api GET /api/v1/namespaces/default/serviceaccounts/default) == 200 ]] && break
		for n in kube-controller-manager kube-scheduler kwok; do
			alive $n || exited $n
		done
		[[ $i == 300 ]] && die "the default ServiceAccount did not appear in 60s; see $STATE/logs/kube-controller-manager.log"
		sleep 0.2
	done
	log "controller-manager, scheduler and kwok up after $(elapsed)s"
fi

# 2. The fake GPU nodes (created, or uncordoned when they exist).
node_json() { # name product memMiB count clique rack zone gpus [extra allocatable json]
	local res="\"cpu\":\"64\",\"memory\":\"512Gi\",\"pods\":\"110\",\"nvidia.com/gpu\":\"$8\"${9:+,$9}"
	cat <<NJ
{"apiVersion":"v1","kind":"Node","metadata":{"name":"$1",
 "annotations":{"kwok.x-k8s.io/node":"fake","node.alpha.kubernetes.io/ttl":"0"},
 "labels":{"kubernetes.io/hostname":"$1","kubernetes.io/os":"linux","kubernetes.io/arch":"amd64","type":"kwok",
  "nvidia.com/gpu.present":"true","nvidia.com/gpu.product":"$2","nvidia.com/gpu.memory":"$3","nvidia.com/gpu.count":"$4",
  "nvidia.com/gpu.clique":"$5","topology.kubernetes.io/rack":"$6","topology.kubernetes.io/zone":"$7"}},
 "spec":{"taints":[{"key":"kwok.x-k8s.io/node","value":"fake","effect":"NoSchedule"}]},
 "status":{"capacity":{$res},"allocatable":{$res}}}
NJ
}
apply_node() {
	local code
	code=$(api POST /api/v1/nodes "$(node_json "$@")")
	case $code in
	201) log "node $1 created" ;;
	409)
		code=$(api PATCH "/api/v1/nodes/$1" '{"spec":{"unschedulable":null}}' application/merge-patch+json)
		[[ $code == 200 ]] || die "uncordon node $1: HTTP $code $(cat "$STATE/last.json")"
		log "node $1 exists (uncordoned)"
		;;
	*) die "create node $1: HTTP $code $(cat "$STATE/last.json")" ;;
	esac
}
apply_node gpu-h100-0 NVIDIA-H100-80GB-HBM3 81559 8 clique-a.1 rack-a zone-a 8
apply_node gpu-h100-1 NVIDIA-H100-80GB-HBM3 81559 8 clique-a.1 rack-a zone-a 8
apply_node gpu-a100-mig NVIDIA-A100-SXM4-80GB 81920 6 clique-b.1 rack-b zone-a 4 '"nvidia.com/mig-1g.10gb":"14"'
for i in $(seq 1 150); do
	n=0 stale=0
	if [[ $(api GET /api/v1/nodes) == 200 ]]; then
		n=$(tr -d ' \n' <"$STATE/last.json" | grep -o '"type":"Ready","status":"True"' | wc -l)
		# After a restart the node controller may still hold them unreachable.
		stale=$(grep -c 'node.kubernetes.io/\(unreachable\|not-ready\)' "$STATE/last.json" || true)
	fi
	[[ $n -ge 3 && $stale == 0 ]] && break
	[[ $i == 150 ]] && die "the KWOK nodes did not become Ready in 30s; see $STATE/logs/kwok.log"
	sleep 0.2
done
log "ready in $(elapsed)s: 3 KWOK GPU nodes; source $ENV"
