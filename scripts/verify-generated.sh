#!/usr/bin/env bash
# verify-generated.sh checks that the generated code checked in under proto/
# matches what scripts/generate.sh produces from the .proto files now. It
# regenerates into a temporary folder and compares every generated file
# (*.pb.go, *.pb.gw.go, *.swagger.json), including files that exist on only
# one side. It never modifies the repository.
#
# Exit status: 0 when up to date, 1 when anything is stale.
set -euo pipefail
export LC_ALL=C

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/meridian-verify.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

bash "$ROOT/scripts/generate.sh" "$TMP/proto" >"$TMP/generate.log" 2>&1 || {
	cat "$TMP/generate.log" >&2
	echo "verify-generated.sh: generation failed (see above)" >&2
	exit 1
}

list_generated() {
	(cd "$1" && find . -type f \( -name '*.pb.go' -o -name '*.pb.gw.go' -o -name '*.swagger.json' \) | sed 's|^\./||' | sort)
}

list_generated "$ROOT/proto" >"$TMP/have.txt"
list_generated "$TMP/proto" >"$TMP/want.txt"

stale=0
while IFS= read -r f; do
	if [ ! -f "$ROOT/proto/$f" ]; then
		echo "STALE: proto/$f is missing (generate.sh produces it)" >&2
		stale=1
	elif ! cmp -s "$ROOT/proto/$f" "$TMP/proto/$f"; then
		echo "STALE: proto/$f differs from freshly generated code:" >&2
		diff -u "$ROOT/proto/$f" "$TMP/proto/$f" | head -n 40 >&2 || true
		stale=1
	fi
done <"$TMP/want.txt"
while IFS= read -r f; do
	if [ ! -f "$TMP/proto/$f" ]; then
		echo "STALE: proto/$f is checked in but no longer generated (delete it)" >&2
		stale=1
	fi
done <"$TMP/have.txt"

if [ "$stale" -ne 0 ]; then
	echo "verify-generated.sh: generated code is out of date; run 'make generate' (scripts/generate.sh) and commit the result." >&2
	exit 1
fi
echo "verify-generated.sh: generated code is up to date ($(wc -l <"$TMP/want.txt") files)." >&2
