// Package openb replays the Alibaba GPU cluster trace v2023 ("OpenB") the way
// Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
// Fragmentation Gradient Descent" (USENIX ATC 2023) evaluate schedulers, so
// that Meridian's placement policies can be compared with the paper's
// published figures.
//
// The replay follows the paper's public simulator: the 1,213 GPU nodes, no
// departures, one scheduling attempt per pod, CPU + memory + GPU fitting on
// one node, the gpu_spec model constraint, pods sorted by name and shuffled
// with rand.New(rand.NewSource(seed)), workload tuning to 1.3x the cluster's
// GPU capacity, and the GPU allocation ratio read off at each arrived-load
// percent 0..130. Node choice goes through gpufit scorers; ties are broken
// uniformly at random with the same seeded source, as the Kubernetes
// scheduler does.
//
// Loading CSV files is the only I/O here (LoadNodesFile, LoadPodsFile,
// DataDir); Replay itself is pure and deterministic for a given seed. This
// package must never copy trace files anywhere, reach the network, read the
// clock inside Replay, or use the global random source.
package openb
