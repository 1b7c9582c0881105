#!/usr/bin/env bash
# tools.sh installs the pinned code generators Meridian needs into a cache
# directory outside the repository, skipping any that are already present.
#
#   MERIDIAN_TOOLS   cache directory (default: $HOME/.cache/meridian/tools)
#
# Binaries land in "$MERIDIAN_TOOLS/bin". protoc itself comes from the
# Debian packages protobuf-compiler and libprotobuf-dev (installed with
# apt-get when running as root). The script is idempotent: a second run
# only prints what it found.
#
# Usage from other scripts:
#   bash scripts/tools.sh && export PATH="$MERIDIAN_TOOLS/bin:$PATH"
set -euo pipefail

TOOLS_DIR="${MERIDIAN_TOOLS:-$HOME/.cache/meridian/tools}"
BIN_DIR="$TOOLS_DIR/bin"
mkdir -p "$BIN_DIR"

# Pinned versions. Keep these in step with go.mod (protobuf, grpc-gateway,
# vtprotobuf: its generated code calls the runtime module of the same
# version). vtprotobuf is the commit after v0.6.0 that grpc v1.85 itself
# requires, so go.mod cannot hold v0.6.0 without downgrading grpc; it is
# v0.6.0 plus the fix that encodes a oneof's empty message as
# google.golang.org/protobuf does (vtprotobuf issue 61), which
# RuntimeTemplate.kind and HubMessage.kind need.
PROTOC_GEN_GO_VERSION="v1.36.12"
PROTOC_GEN_GO_GRPC_VERSION="v1.6.2"
GRPC_GATEWAY_VERSION="v2.33.0"
VTPROTOBUF_VERSION="v0.6.1-0.20240319094008-0393e58bdf10"

log() { printf 'tools.sh: %s\n' "$*" >&2; }

# --- protoc (Debian) --------------------------------------------------------
ensure_protoc() {
	if command -v protoc >/dev/null 2>&1 && [ -f /usr/include/google/protobuf/struct.proto ]; then
		log "protoc present: $(protoc --version) ($(command -v protoc))"
		return 0
	fi
	if [ "$(id -u)" != "0" ]; then
		cat >&2 <<'EOF'
************************************************************************
tools.sh: protoc is missing and this script is not running as root.
  Install it yourself, then re-run:
      sudo apt-get install -y protobuf-compiler libprotobuf-dev
************************************************************************
EOF
		return 1
	fi
	log "installing protoc from Debian: apt-get install -y protobuf-compiler libprotobuf-dev"
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q protobuf-compiler libprotobuf-dev >&2; then
		log "apt-get install failed; running apt-get update once and retrying"
		DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q protobuf-compiler libprotobuf-dev >&2
	fi
	log "protoc installed: $(protoc --version)"
}

# --- Go plugins -------------------------------------------------------------
# A plugin is reinstalled when the binary is missing or its recorded version
# differs from the pinned one (the stamp file "$BIN_DIR/.<name>.version").
ensure_go_tool() {
	local name="$1" pkg="$2" version="$3"
	local stamp="$BIN_DIR/.$name.version"
	if [ -x "$BIN_DIR/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
		log "$name $version present"
		return 0
	fi
	log "installing $name $version: GOBIN=$BIN_DIR go install $pkg@$version"
	# GOFLAGS=-mod=mod keeps the repository's go.mod out of the picture;
	# installing pkg@version never edits any go.mod.
	(cd "$TOOLS_DIR" && GOBIN="$BIN_DIR" GOFLAGS=-mod=mod go install "$pkg@$version")
	printf '%s\n' "$version" >"$stamp"
}

ensure_protoc
ensure_go_tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
ensure_go_tool protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"
ensure_go_tool protoc-gen-grpc-gateway github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway "$GRPC_GATEWAY_VERSION"
ensure_go_tool protoc-gen-openapiv2 github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2 "$GRPC_GATEWAY_VERSION"
ensure_go_tool protoc-gen-go-vtproto github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto "$VTPROTOBUF_VERSION"
log "all tools ready in $BIN_DIR"
