// Package config is the spoke agent's typed configuration:
// AgentConfiguration (apiVersion meridian.io/v1alpha1), its defaults, its
// validation and the table that ties each setting to its YAML path, its
// meridian-agent flag and its environment variables. Package
// componentconfig loads it: defaults, then a YAML file, then the
// environment, then flags.
//
// What this package must never do:
//
//   - Import a connector (they pull in their client libraries): the few
//     connector constants repeated here are checked equal to the
//     connectors' by cmd/meridian-agent's tests.
//   - Read a file or dial anything while validating: `meridian-agent
//     config validate` checks a file on any machine. Whether a path
//     exists is checked when the connector or the NATS connection is
//     built.
package config

// The JSON Schema of docs/config is generated from the types by a test.
//
//go:generate go test -run TestJSONSchemaUpToDate -update .
