// Package validation checks Meridian API objects before the hub stores or
// acts on them, and decodes workloads written as YAML or JSON for the CLI.
//
// It is pure: no I/O, no clock, no randomness, no goroutines, no global
// state. The same input always gives the same result, so the hub, the CLI
// and the simulator can all call it and agree.
//
// What it provides:
//
//  1. ValidateWorkload and ValidateQueue return nil for a valid object, or a
//     gRPC status error with code InvalidArgument that carries one
//     errdetails.BadRequest with one FieldViolation per problem. Field paths
//     use proto field names, dots and indexes, for example
//     `pod_sets[1].resources.gpu_milli` or `labels["team"]`, and the error
//     message lists every violation in plain words. The violations come in a
//     stable order (fields in declaration order, map keys sorted).
//  2. FieldViolations extracts the violations from such an error (also when
//     it is wrapped).
//  3. DecodeWorkload turns a YAML or JSON document of at most 1 MiB into a
//     Workload, rejecting unknown fields, and returns a *DecodeError naming
//     the field path and source line when it can.
//
// What it must never do:
//
//   - panic, whatever the input (the fuzz targets FuzzDecodeWorkload and
//     FuzzValidateWorkload hold it to that);
//   - modify the object it checks, or fill in defaults (defaulting belongs to
//     the API server, after validation);
//   - look anything up: whether a queue or cluster exists is for the caller
//     to check against its store.
package validation
