// Package config is the hub's typed configuration: HubConfiguration
// (apiVersion meridian.io/v1alpha1), its defaults, its validation and the
// table that ties each setting to its YAML path, its meridian-hub flag and
// its environment variables. Package componentconfig loads it: defaults,
// then a YAML file, then the environment, then flags.
//
// The auth, api.tls and audit sections are data only for now: they are
// loaded and validated here and carried to the server by cmd/meridian-hub
// once the server has fields for them. Whether a permission name exists is
// hub/authz's business; it plugs in through Options.ValidatePermission.
//
// What this package must never do:
//
//   - Import hub/server or any package that runs the hub: the server may
//     come to import these types, and validation must stay pure (no file
//     reads, no network) so that `meridian-hub config validate` can check
//     a file on any machine.
//   - Hold a secret in a field that is not marked Secret in Fields.
package config

// The JSON Schema of docs/config is generated from the types by a test.
//
//go:generate go test -run TestJSONSchemaUpToDate -update .
