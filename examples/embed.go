package examples

import "embed"

// FS holds queues/*.yaml, workloads/*.yaml and sim/*.yaml.
//
//go:embed queues/*.yaml workloads/*.yaml sim/*.yaml
var FS embed.FS
