#!/usr/bin/env bash
# soak.sh: the chaos soak (meridian-soak run). Builds meridian-soak,
# meridian-hub and meridian-agent into $DIR/bin, then starts, on loopback,
# a 3-member etcd cluster, a 3-node NATS cluster with R3 streams, the hub
# replicas and the agents, drives a seeded load while a seeded schedule of
# faults hits them, checks the invariants and prints a JSON summary as its
# last line. Exits non-zero when an invariant broke. Every process it
# starts is stopped when it ends.
#
# Environment (make soak passes its variables through):
#   DURATION  how long the load runs (default 3m)
#   SEED      the seed of the load and the faults (default: from the clock; printed)
#   RATE      submits per second (default 500; the summary says what was achieved)
#   HUBS      hub replicas (default 3)
#   AGENTS    agents, 192 simulated H100s each (default 4)
#   DIR       data, logs and launch journals (default: a new temporary directory, kept)
#   ARGS      further meridian-soak run flags (--faults, --settle, --leader-ttl, ...)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-3m}
RATE=${RATE:-500}
HUBS=${HUBS:-3}
AGENTS=${AGENTS:-4}
DIR=${DIR:-$(mktemp -d -t meridian-soak.XXXXXX)}
mkdir -p "$DIR/bin"
echo "soak: building into $DIR/bin"
go build -o "$DIR/bin/" ./cmd/meridian-soak ./cmd/meridian-hub ./cmd/meridian-agent
args=(run --dir "$DIR" --duration "$DURATION" --rate "$RATE" --hubs "$HUBS" --agents "$AGENTS"
  --hub-bin "$DIR/bin/meridian-hub" --agent-bin "$DIR/bin/meridian-agent")
if [ -n "${SEED:-}" ]; then
  args+=(--seed "$SEED")
fi
# shellcheck disable=SC2206 # ARGS is split on purpose
args+=(${ARGS:-})
echo "soak: logs in $DIR/logs, launch journals in $DIR/journals"
exec "$DIR/bin/meridian-soak" "${args[@]}"
