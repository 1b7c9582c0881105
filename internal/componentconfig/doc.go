// Package componentconfig loads the typed configuration of a Meridian
// binary (meridian-hub, meridian-agent) the way kube-scheduler loads its
// KubeSchedulerConfiguration: one versioned struct with defaults, then a
// YAML file, then environment variables, then command-line flags, each
// layer overriding the one before; validated once, with every problem
// reported together and named by its field path.
//
// A binary describes its configuration with a Schema: the Go type, its
// defaults, its validation, and a Field table that names each setting's
// YAML path, flag and environment variables and documents it. From that
// one table the package derives the flags, the environment lookups, the
// redaction of secrets when printing, and a JSON Schema for editors.
//
// Caller's duties:
//
//  1. Build one Loader per command invocation with NewLoader and register
//     its flags on the command's flag set with AddFlags.
//  2. After the flags are parsed, call Load once. It returns the
//     validated configuration or an ErrorList naming every bad field.
//  3. Turn the configuration into the component's own options (a server
//     config, connector configs). Checks that need I/O (reading a
//     certificate, dialling) belong there, not in Schema.Validate.
//
// What this package must never do:
//
//   - Read a secret from a configuration file, or print one: fields marked
//     Secret come from the environment only and are shown as <redacted>.
//   - Accept a key it does not know: an unknown key is an error naming its
//     path, with a suggestion when a known key is close.
//   - Know about any one component: it holds no hub or agent field.
package componentconfig
