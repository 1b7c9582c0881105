#!/usr/bin/env bash
# slurm-up.sh: start a real, loopback-only Slurm cluster on this host for
# Meridian's Slurm connector tests and demo.
#
#   munge, slurmctld, four slurmd (gpu1..gpu4, 8 fake H100 each, shard and
#   mps GRES), a leaf/spine topology (gpu[1-2] on leaf1, gpu[3-4] on leaf2)
#   and slurmrestd with JWT auth on 127.0.0.1.
#
# Idempotent: packages are installed only when missing, daemons that already
# answer are left alone, and it waits until sinfo shows all four nodes idle.
# Configs, logs, spool and the env file live in the state dir
#   ${MERIDIAN_SLURM_DIR:-$HOME/.cache/meridian/slurm}
# never in the repository. Source "$MERIDIAN_SLURM_DIR/env" to reach it
# (SLURM_CONF, MERIDIAN_SLURM_REST_URL, MERIDIAN_SLURM_TOKEN, ...).
#
# Environment:
#   MERIDIAN_SLURM_DIR         state dir (see above)
#   MERIDIAN_SLURM_CTLD_PORT   slurmctld port (default 6817)
#   MERIDIAN_SLURM_NODE_PORT   first slurmd port, four in a row (default 17001)
#   MERIDIAN_SLURM_REST_PORT   slurmrestd port on 127.0.0.1 (default 6820)
#   MERIDIAN_SLURM_NO_INSTALL  1: never run apt-get, fail if packages are missing
#
# Exit codes: 0 ready; 1 failure; 3 not root (nothing was done).
set -euo pipefail

EXIT_NOT_ROOT=3
STATE=${MERIDIAN_SLURM_DIR:-$HOME/.cache/meridian/slurm}
CTLD_PORT=${MERIDIAN_SLURM_CTLD_PORT:-6817}
NODE_PORT=${MERIDIAN_SLURM_NODE_PORT:-17001}
REST_PORT=${MERIDIAN_SLURM_REST_PORT:-6820}
NODES=(gpu1 gpu2 gpu3 gpu4)
PACKAGES=(munge slurmctld slurmd slurmrestd slurm-client slurm-wlm-jwt-plugin curl)
T0=$(date +%s.%N)

log() { printf 'slurm-up: %s\n' "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

if [[ $(id -u) -ne 0 ]]; then
	cat >&2 <<'EOF'
################################################################################
# slurm-up.sh: NOT RUNNING AS ROOT - nothing started.
# A local Slurm cluster needs root: it installs Debian packages (munge,
# slurmctld, slurmd, slurmrestd, slurm-client, slurm-wlm-jwt-plugin) and runs
# slurmd as root. Run it as root (sudo scripts/slurm-up.sh) or skip the Slurm
# tests.
################################################################################
EOF
	exit "$EXIT_NOT_ROOT"
fi

# One run at a time. The Slurm test packages run in parallel and each calls
# this script: two runs rewriting the configs at once saw each other's
# half-written files as a configuration change and restarted the daemons
# under the other package's jobs. A second run waits here, then finds
# everything up and changes nothing. The daemons started below get the
# lock's descriptor closed (9>&-), so it is released when this script ends.
mkdir -p "$STATE"
exec 9>"$STATE/.slurm-up.lock"
flock -w 300 9 || die "another slurm-up.sh has held $STATE/.slurm-up.lock for 5 minutes"

# ---- packages ---------------------------------------------------------------
jwt_plugin() { ls /usr/lib/*/slurm-wlm/auth_jwt.so /usr/lib/slurm-wlm/auth_jwt.so 2>/dev/null | head -n1; }
missing=()
for p in "${PACKAGES[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
if ((${#missing[@]})); then
	[[ ${MERIDIAN_SLURM_NO_INSTALL:-0} == 1 ]] && die "packages missing and MERIDIAN_SLURM_NO_INSTALL=1: ${missing[*]}"
	log "installing ${missing[*]}"
	# Keep the packages' postinst scripts from starting daemons with the
	# stock config; remove the policy file only if we created it.
	created_policy=0
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		created_policy=1
	fi
	cleanup_policy() { if ((created_policy)); then rm -f /usr/sbin/policy-rc.d; fi; }
	trap cleanup_policy EXIT
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q -o DPkg::Lock::Timeout=180 --no-install-recommends "${missing[@]}" >"${TMPDIR:-/tmp}/meridian-slurm-apt.log" 2>&1; then
		log "apt-get install failed; running apt-get update and retrying"
		apt-get update -q -o DPkg::Lock::Timeout=180 >>"${TMPDIR:-/tmp}/meridian-slurm-apt.log" 2>&1 || true
		apt-get install -y -q -o DPkg::Lock::Timeout=180 --no-install-recommends "${missing[@]}" >>"${TMPDIR:-/tmp}/meridian-slurm-apt.log" 2>&1 ||
			die "apt-get install ${missing[*]} failed; see ${TMPDIR:-/tmp}/meridian-slurm-apt.log"
	fi
	cleanup_policy
	trap - EXIT
	log "installed in $(elapsed)s"
fi
[[ -n $(jwt_plugin) ]] || die "auth_jwt.so not found after installing slurm-wlm-jwt-plugin"

# ---- state dir and configs --------------------------------------------------
HOST=$(hostname -s)
ADDR=$(getent hosts "$HOST" | awk '{print $1; exit}')
mkdir -p "$STATE"/{etc,log,run,dev,spool/ctld}
for n in "${NODES[@]}"; do mkdir -p "$STATE/spool/$n"; done
for i in 0 1 2 3 4 5 6 7; do
	# slurmd insists on character or block devices: symlink /dev/null.
	ln -sfn /dev/null "$STATE/dev/nvidia$i"
done
if [[ ! -s $STATE/etc/jwt.key ]]; then
	(umask 077 && head -c 32 /dev/urandom >"$STATE/etc/jwt.key")
fi
chmod 600 "$STATE/etc/jwt.key"

comm_params=""
if [[ $ADDR == 127.* ]]; then
	# Bind the daemons to the loopback address the hostname resolves to.
	comm_params="CommunicationParameters=NoCtldInAddrAny,NoInAddrAny"
else
	log "WARNING: $HOST resolves to $ADDR, not loopback; slurmd will listen on all addresses of this host"
fi

last_port=$((NODE_PORT + ${#NODES[@]} - 1))
new_conf=$(mktemp)
cat >"$new_conf" <<EOF
# Written by scripts/slurm-up.sh; edits are overwritten.
ClusterName=meridian
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$STATE/etc/jwt.key
CredType=cred/munge
StateSaveLocation=$STATE/spool/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SlurmdParameters=config_overrides
# Node failure is noticed fast, so tests that kill a slurmd do not wait
# long. slurmctld pings a node every SlurmdTimeout/3 s; a failed ping shows
# only after MessageTimeout, and then the node is NOT_RESPONDING (no
# capacity for Meridian); after SlurmdTimeout without an answer it is DOWN.
# Measured on a 2-core host: NOT_RESPONDING 8-11 s and DOWN 16-19 s after
# a SIGKILL, against 20 s and 40 s with the old 30/10. Lower values risk
# healthy daemons on a loaded host being marked down.
SlurmdTimeout=10
MessageTimeout=5
MinJobAge=300
DefMemPerCPU=4000
KillWait=5
InactiveLimit=0
$comm_params
GresTypes=gpu,shard,mps
TopologyPlugin=topology/tree
NodeName=gpu[1-2] NodeAddr=127.0.0.1 NodeHostname=$HOST Port=[$NODE_PORT-$((NODE_PORT + 1))] CPUs=32 RealMemory=256000 Gres=gpu:h100:8,shard:32,mps:800 Features=h100,nvlink,leaf1 State=UNKNOWN
NodeName=gpu[3-4] NodeAddr=127.0.0.1 NodeHostname=$HOST Port=[$((NODE_PORT + 2))-$last_port] CPUs=32 RealMemory=256000 Gres=gpu:h100:8,shard:32,mps:800 Features=h100,nvlink,leaf2 State=UNKNOWN
PartitionName=gpu Nodes=gpu[1-4] Default=YES MaxTime=INFINITE State=UP
EOF
new_gres=$(mktemp)
cat >"$new_gres" <<EOF
# Written by scripts/slurm-up.sh: fake GPUs (symlinks to /dev/null).
AutoDetect=off
Name=gpu Type=h100 File=$STATE/dev/nvidia[0-7]
Name=shard Count=32
Name=mps Count=800
EOF
new_topo=$(mktemp)
cat >"$new_topo" <<'EOF'
# Written by scripts/slurm-up.sh: two leaf switches under one spine.
SwitchName=leaf1 Nodes=gpu[1-2]
SwitchName=leaf2 Nodes=gpu[3-4]
SwitchName=spine Switches=leaf[1-2]
EOF
changed=0
replace() { # replace <new> <dest>: move new over dest when different
	if ! cmp -s "$1" "$2"; then
		mv "$1" "$2"
		changed=1
	else
		rm -f "$1"
	fi
}
replace "$new_conf" "$STATE/etc/slurm.conf"
replace "$new_gres" "$STATE/etc/gres.conf"
replace "$new_topo" "$STATE/etc/topology.conf"
chmod 644 "$STATE/etc/slurm.conf" "$STATE/etc/gres.conf" "$STATE/etc/topology.conf"
export SLURM_CONF=$STATE/etc/slurm.conf

# ---- daemons ----------------------------------------------------------------
pid_alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
wait_for() { # wait_for <seconds> <what> <command...>
	local limit=$1 what=$2
	shift 2
	local deadline=$(($(date +%s) + limit))
	until "$@" >/dev/null 2>&1; do
		(($(date +%s) < deadline)) || return 1
		sleep 0.2
	done
	log "$what ready after $(elapsed)s"
}

if ((changed)) && pid_alive "$STATE/run/slurmctld.pid"; then
	log "configuration changed: restarting the daemons"
	MERIDIAN_SLURM_DIR=$STATE "$(dirname "$0")/slurm-down.sh" >/dev/null 2>&1 || true
fi

# munge
if ! (munge -n | unmunge) >/dev/null 2>&1; then
	if [[ ! -s /etc/munge/munge.key ]]; then
		mungekey --create >/dev/null 2>&1 || die "mungekey --create failed"
		chown munge:munge /etc/munge/munge.key
	fi
	mkdir -p /run/munge && chown munge:munge /run/munge
	runuser -u munge -- /usr/sbin/munged 9>&- || die "munged failed to start"
	wait_for 10 munge sh -c 'munge -n | unmunge' || die "munge does not answer"
fi

# slurmctld
if ! pid_alive "$STATE/run/slurmctld.pid"; then
	(cd / && slurmctld -f "$SLURM_CONF" 9>&-) || die "slurmctld failed; see $STATE/log/slurmctld.log"
fi
wait_for 20 slurmctld scontrol ping || die "slurmctld does not answer; see $STATE/log/slurmctld.log"

# slurmd, one per node
for n in "${NODES[@]}"; do
	if ! pid_alive "$STATE/run/slurmd-$n.pid"; then
		(cd / && slurmd -f "$SLURM_CONF" -N "$n" 9>&-) || die "slurmd $n failed; see $STATE/log/slurmd-$n.log"
	fi
done

# A node may come back DOWN or DRAINED from an earlier run (killed slurmd,
# a test that drained it); resume it so every run starts from a clean cluster.
for n in "${NODES[@]}"; do
	st=$(sinfo -h -n "$n" -o '%T' 2>/dev/null || true)
	case $st in
	*drain* | *down* | *fail*) scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true ;;
	esac
done
# Ready: every node responding and up (idle, or mixed/allocated when jobs
# from an earlier run still hold it); "idle*" (not responding) is not ready.
all_ready() {
	local out
	out=$(sinfo -h -N -p gpu -o '%N %T') || return 1
	[[ $(grep -cE ' (idle|mixed|allocated)$' <<<"$out") -eq ${#NODES[@]} ]]
}
wait_for 60 "4 nodes up" all_ready || {
	sinfo -N >&2 || true
	die "nodes did not come up; see $STATE/log/"
}

# slurmrestd refuses to run as root and reads slurm.conf after dropping to
# nobody, who may not reach the state dir (a home dir is often mode 700): it
# gets a world-readable copy of the configs (not the JWT key) under /run.
REST_ETC=/run/meridian-slurm-$(printf '%s' "$STATE" | cksum | cut -d' ' -f1)
mkdir -p "$REST_ETC"
chmod 755 "$REST_ETC"
for f in slurm.conf gres.conf topology.conf; do
	if ! cmp -s "$STATE/etc/$f" "$REST_ETC/$f"; then
		install -m 644 "$STATE/etc/$f" "$REST_ETC/$f"
		[[ $f == slurm.conf ]] && [[ -s $STATE/run/slurmrestd.pid ]] && kill "$(cat "$STATE/run/slurmrestd.pid")" 2>/dev/null || true
	fi
done
rest_up() { [[ $(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$REST_PORT/slurm/v0.0.38/ping") =~ ^(200|401)$ ]]; }
# A running slurmrestd that misses one ping on a loaded machine is not down:
# restarting it would cut off another test package using it right now (the
# test packages run in parallel and each calls this script).
rest_answers() {
	local i
	for i in 1 2 3 4 5; do
		rest_up && return 0
		sleep 1
	done
	return 1
}
# slurmrestd keeps the working directory it was started in, and a job
# submitted through it fails ("getcwd failed") and takes slurmrestd down
# when that directory is gone, as a test's or a deleted checkout's is. It
# is started from /, and one running in a deleted directory is restarted.
cwd_gone() {
	local pid
	pid=$(cat "$STATE/run/slurmrestd.pid" 2>/dev/null) || return 1
	[[ $(readlink "/proc/$pid/cwd" 2>/dev/null) == *" (deleted)" ]]
}
if ! pid_alive "$STATE/run/slurmrestd.pid" || cwd_gone || ! rest_answers; then
	[[ -s $STATE/run/slurmrestd.pid ]] && kill "$(cat "$STATE/run/slurmrestd.pid")" 2>/dev/null || true
	(cd / && SLURM_CONF=$REST_ETC/slurm.conf SLURM_JWT=daemon exec setsid slurmrestd -u nobody -g nogroup -a rest_auth/jwt \
		-s openapi/v0.0.38,openapi/v0.0.37,openapi/v0.0.36 "127.0.0.1:$REST_PORT" \
		>>"$STATE/log/slurmrestd.log" 2>&1 </dev/null 9>&-) &
	echo $! >"$STATE/run/slurmrestd.pid"
fi
wait_for 20 slurmrestd rest_up || die "slurmrestd does not answer; see $STATE/log/slurmrestd.log"

# A token for tests and the demo; the connector can also mint its own from
# the key file.
token=$(scontrol token username=root lifespan=86400 2>/dev/null | sed -n 's/^SLURM_JWT=//p')
[[ -n $token ]] || die "scontrol token failed"
cat >"$STATE/env.new" <<EOF
# Written by scripts/slurm-up.sh. Source it to reach the local Slurm cluster.
export SLURM_CONF=$SLURM_CONF
export MERIDIAN_SLURM_DIR=$STATE
export MERIDIAN_SLURM_REST_URL=http://127.0.0.1:$REST_PORT
export MERIDIAN_SLURM_USER=root
export MERIDIAN_SLURM_TOKEN=$token
export MERIDIAN_SLURM_JWT_KEY=$STATE/etc/jwt.key
export MERIDIAN_SLURM_PARTITION=gpu
EOF
chmod 600 "$STATE/env.new"
mv "$STATE/env.new" "$STATE/env"

cat >&2 <<EOF
slurm-up: ready in $(elapsed)s
  munged         (system key /etc/munge/munge.key)
  slurmctld      127.0.0.1:$CTLD_PORT   log $STATE/log/slurmctld.log
  slurmd x4      gpu1..gpu4 on 127.0.0.1:$NODE_PORT-$last_port, 8 fake h100 + shard:32 + mps:800 each
  topology       leaf1=gpu[1-2] leaf2=gpu[3-4] spine=leaf[1-2]
  slurmrestd     http://127.0.0.1:$REST_PORT (JWT; openapi v0.0.38; config copy in $REST_ETC)
  env file       $STATE/env   (source it: SLURM_CONF, MERIDIAN_SLURM_REST_URL, MERIDIAN_SLURM_TOKEN)
  stop with      scripts/slurm-down.sh
EOF
