#!/usr/bin/env bash
# tf-demo.sh applies terraform/examples/organisation (a tenant with three
# teams, borrowing, access lists and a CI token) to the hub that
# `make demo-forever` keeps running, with the provider built from this
# checkout and a dev_overrides CLI configuration (no registry, no init).
#
#   scripts/tf-demo.sh            build, apply, then show that a second plan is empty
#   scripts/tf-demo.sh destroy    destroy what the apply created
#
# It finds the demo hub through MERIDIAN_CONFIG (the line the demo prints),
# else the newest demo state directory in ${TMPDIR:-/tmp}. It runs OpenTofu
# ($TOFU, else tofu on PATH, else the one tools/tofu/build.sh built, else
# terraform on PATH). Its Terraform state stays in the demo's state
# directory.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "tf-demo: $*" >&2; exit 1; }

cfg=${MERIDIAN_CONFIG:-}
if [[ -z "$cfg" ]]; then
	cfg=$(ls -t "${TMPDIR:-/tmp}"/meridian-demo-*/meridianctl.yaml 2>/dev/null | head -1 || true)
fi
[[ -n "$cfg" && -f "$cfg" ]] || die "no demo hub found: run 'make demo-forever' in another terminal first (or export MERIDIAN_CONFIG as it says)"
state_dir=$(dirname "$cfg")
hub=$(awk '$1 == "hub:" {print $2; exit}' "$cfg")
token_file=$(awk '$1 == "tokenFile:" {print $2; exit}' "$cfg")
[[ -n "$hub" && -f "$token_file" ]] || die "$cfg names no hub or token file"

# OpenTofu first ($TOFU, on PATH, or the one tools/tofu/build.sh built),
# then Terraform; else build OpenTofu (about 30 minutes cold).
tofu=${TOFU:-}
cached="${MERIDIAN_TOFU_CACHE:-$HOME/.cache/meridian/tofu-v1.12.6}/bin/tofu"
if [[ -z "$tofu" ]]; then
	tofu=$(command -v tofu || true)
fi
if [[ -z "$tofu" && -x "$cached" ]]; then
	tofu=$cached
fi
if [[ -z "$tofu" ]]; then
	tofu=$(command -v terraform || true)
fi
if [[ -z "$tofu" ]]; then
	tofu=$(bash tools/tofu/build.sh) || die "no OpenTofu or Terraform found, and building OpenTofu failed"
fi

bin="$PWD/bin"
mkdir -p "$bin"
echo "tf-demo: building the provider into bin/"
go build -o "$bin/terraform-provider-meridian" ./cmd/terraform-provider-meridian

work="$state_dir/terraform"
mkdir -p "$work"
cp terraform/examples/organisation/main.tf "$work/main.tf"
cat >"$work/dev.tfrc" <<RC
# Use the provider built from this checkout instead of the registry's.
provider_installation {
  dev_overrides {
    "meridian-gpu/meridian" = "$bin"
  }
  direct {}
}
RC
export TF_CLI_CONFIG_FILE="$work/dev.tfrc" CHECKPOINT_DISABLE=1 TF_IN_AUTOMATION=1
export MERIDIAN_ENDPOINT="$hub"
MERIDIAN_TOKEN=$(cat "$token_file")
export MERIDIAN_TOKEN

echo "tf-demo: hub $hub, configuration $work/main.tf, $("$tofu" version | head -1)"
if [[ "${1:-}" == destroy ]]; then
	"$tofu" -chdir="$work" destroy -auto-approve
	exit 0
fi
"$tofu" -chdir="$work" apply -auto-approve
echo "tf-demo: planning again; it should find nothing to change"
"$tofu" -chdir="$work" plan -detailed-exitcode
cat <<EOF2

tf-demo: applied. In this shell, try:
  export MERIDIAN_CONFIG=$cfg
  go run ./cmd/meridianctl queues              # initech and its teams, next to the demo's acme
  go run ./cmd/meridianctl queue apply -f q.yaml   # change a quota of initech/nlp behind Terraform's back...
  make tf-demo                                 # ...and the plan shows it and the apply puts it back
  make tf-demo ARGS=destroy                    # remove the organisation
EOF2
