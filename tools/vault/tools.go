//go:build tools

// Package tools pins the Vault server that tools/vault/build.sh builds for
// the tests (scripts/vault-up.sh, internal/vaultlocal). It is a throwaway
// module, separate from the project's go.mod: Vault is BUSL-licensed and is
// a test dependency only. It must never be imported by the project, nor go
// into an image, a chart or a release artifact.
package tools

import (
	_ "github.com/hashicorp/vault"
	_ "github.com/hashicorp/vault-plugin-auth-kubernetes"
)
