#!/usr/bin/env bash
# generate.sh regenerates all code derived from proto/**/*.proto:
#
#   proto/meridian/v1/*.pb.go             package meridianv1 (messages)
#   proto/meridian/v1/*_grpc.pb.go        gRPC stubs
#   proto/meridian/v1/*.pb.gw.go          grpc-gateway REST handlers
#   proto/meridian/v1/meridian.swagger.json   one merged OpenAPI v2 document
#   proto/meridian/agent/v1/*.pb.go       package agentv1 (wire protocol)
#   proto/meridian/{v1,agent/v1}/*_vtproto.pb.go
#                                         reflection-free MarshalVT, UnmarshalVT,
#                                         SizeVT, CloneVT and EqualVT (vtprotobuf),
#                                         which internal/protofast and the agent's
#                                         advertisement deltas use on the hot paths
#
# Usage: scripts/generate.sh [OUT_DIR]
#   OUT_DIR defaults to the repository's proto/ folder. scripts/verify-generated.sh
#   passes a temporary folder to compare against the checked-in files.
#
# The tools are installed (once) by scripts/tools.sh into
# ${MERIDIAN_TOOLS:-$HOME/.cache/meridian/tools}; the output depends only on
# the pinned tool versions and the .proto files, so it is deterministic.
set -euo pipefail
export LC_ALL=C

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS_DIR="${MERIDIAN_TOOLS:-$HOME/.cache/meridian/tools}"
export MERIDIAN_TOOLS="$TOOLS_DIR"

bash "$ROOT/scripts/tools.sh"
BIN="$TOOLS_DIR/bin"

OUT="${1:-$ROOT/proto}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

cd "$ROOT"

# protoc's own well-known types (google/protobuf/*.proto) come from
# libprotobuf-dev.
WKT_INCLUDE=""
for d in /usr/include /usr/local/include; do
	if [ -f "$d/google/protobuf/struct.proto" ]; then
		WKT_INCLUDE="$d"
		break
	fi
done
if [ -z "$WKT_INCLUDE" ]; then
	echo "generate.sh: google/protobuf/struct.proto not found; install libprotobuf-dev (scripts/tools.sh does it as root)" >&2
	exit 1
fi

INCLUDES=(-I proto -I third_party/googleapis -I third_party/openapiv2 -I "$WKT_INCLUDE")
PLUGINS=(
	"--plugin=protoc-gen-go=$BIN/protoc-gen-go"
	"--plugin=protoc-gen-go-grpc=$BIN/protoc-gen-go-grpc"
	"--plugin=protoc-gen-grpc-gateway=$BIN/protoc-gen-grpc-gateway"
	"--plugin=protoc-gen-openapiv2=$BIN/protoc-gen-openapiv2"
	"--plugin=protoc-gen-go-vtproto=$BIN/protoc-gen-go-vtproto"
)
# vtprotobuf: fast marshal, unmarshal, size, clone and equality, beside the messages.
# Its MarshalVT does not sort map keys, so it is not a deterministic
# encoding where a message holds a map (internal/protofast says where that
# matters).
VTPROTO=(--go-vtproto_out="$OUT" --go-vtproto_opt=paths=source_relative,features=marshal+unmarshal+size+clone+equal)

# File lists, relative to proto/ (the import root), in a fixed order.
mapfile -t API_PROTOS < <(cd proto && find meridian/v1 -maxdepth 1 -name '*.proto' | sort)
mapfile -t AGENT_PROTOS < <(cd proto && find meridian/agent/v1 -maxdepth 1 -name '*.proto' | sort)

echo "generate.sh: protoc $(protoc --version | awk '{print $2}') -> $OUT" >&2

# Public API: messages, gRPC stubs, REST gateway, merged OpenAPI document.
protoc "${INCLUDES[@]}" "${PLUGINS[@]}" \
	--go_out="$OUT" --go_opt=paths=source_relative \
	--go-grpc_out="$OUT" --go-grpc_opt=paths=source_relative \
	"${VTPROTO[@]}" \
	--grpc-gateway_out="$OUT" --grpc-gateway_opt=paths=source_relative \
	--openapiv2_out="$OUT" \
	--openapiv2_opt=allow_merge=true,merge_file_name=meridian/v1/meridian,disable_service_tags=false,allow_patch_feature=false \
	"${API_PROTOS[@]}"

# Agent wire protocol: messages only (it travels over NATS, not gRPC).
protoc "${INCLUDES[@]}" "${PLUGINS[@]}" \
	--go_out="$OUT" --go_opt=paths=source_relative \
	"${VTPROTO[@]}" \
	"${AGENT_PROTOS[@]}"

echo "generate.sh: done" >&2
