// Package kubernetes is the spoke agent's connector for a Kubernetes
// cluster: it implements agent.Connector with client-go.
//
// What it does:
//
//  1. Inventory, from informers (no polling): every GPU node with its
//     allocatable nvidia.com/gpu, GPU model and memory from the GPU Feature
//     Discovery labels (nvidia.com/gpu.product, .memory, .count), MIG
//     resources (nvidia.com/mig-<profile>), its zone, rack (a configurable
//     label) and NVLink domain (nvidia.com/gpu.clique). Free capacity is
//     allocatable minus the requests of bound, non-terminal pods; cordoned,
//     NotReady and untolerated-tainted nodes are advertised as not
//     schedulable. The configured fractional modes (hami, kai, mig,
//     time-slicing) are advertised to the hub.
//  2. Launch: each pod set becomes an Indexed Job (completions = parallelism
//     = replicas, backoffLimit 0) named deterministically from the dispatch
//     id (JobName), labelled with the dispatch and workload ids. A Job that
//     already exists counts as created. Gangs go through the cluster's own
//     mechanism (Config.Gang): a scheduler-plugins coscheduling PodGroup, or
//     Kueue's queue-name label on suspended Jobs; a missing CRD is a
//     rejection that names it. The hub's placement hint becomes preferred
//     node affinity; it is required only when the workload asks (extra
//     pin_nodes). Fractions render as HAMi, KAI, MIG or time-slicing
//     requests (see Render and docs/kubernetes.md).
//  3. Status, from the Job and pod informers (Status): Running once every
//     Job has its replicas running, Succeeded when every Job completes,
//     Failed with the Job's reason and the container's exit code, Preempted
//     when a pod was evicted or disrupted. When one member of a gang fails,
//     the rest of its Jobs are deleted.
//  4. Cancel deletes the dispatch's Jobs with background propagation (and
//     its PodGroup). List rebuilds everything from the Jobs' labels and
//     annotations, so an agent restart adopts running work.
//
// This package must never touch an object it did not create: every write
// and every delete goes to objects carrying LabelManagedBy=meridian-agent
// and this agent's cluster id, in its one namespace. It must never create a
// dispatch's objects twice, never block Launch or an informer handler on
// the Events channel, never drop an event, and never panic on a malformed
// dispatch or node: bad input is an agent.Reject error naming the field.
package kubernetes
