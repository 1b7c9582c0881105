package examples

import "embed"

// FS holds queues/*.yaml, workloads/*.yaml, sim/*.yaml and config/*.yaml.
//
//go:embed queues/*.yaml workloads/*.yaml sim/*.yaml config/*.yaml
var FS embed.FS
