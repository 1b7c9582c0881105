// Package api implements the hub's public gRPC services (WorkloadService,
// QueueService, ClusterService and AdminService from meridian.v1) over the
// etcd state layer in hub/store, plus the REST pieces that grpc-gateway
// cannot do alone (a submit handler with clear decode errors and a body
// limit) and the gRPC interceptors every hub uses (panic recovery, request
// logging, Prometheus metrics).
//
// # Records
//
// Every record is protobuf binary written with deterministic marshalling:
//
//	/meridian/workloads/<id>           meridianv1.Workload, status included
//	/meridian/queues/<path>            meridianv1.Queue (status and revision not stored)
//	/meridian/idempotency/<sha256 hex> the workload id, as bytes
//
// # Caller's duties
//
//  1. Build a Service with New; Deps.Store is required, every other
//     dependency is optional and the service degrades to a plain answer
//     (for example Explain falls back to the stored pending reason).
//  2. Register it on a grpc.Server with Register, installing
//     UnaryInterceptors/StreamInterceptors and ServerOptions so requests
//     are size-limited, logged, measured and protected from panics.
//  3. For REST, build a gateway mux with NewGatewayMux and call
//     RegisterGateway with a client connection to the gRPC server: it
//     registers the generated handlers and then HandleSubmit, so
//     POST /v1/workloads uses the strict decoder (JSON or YAML, field and
//     line in errors, a body limit answered with 413).
//
// Known gaps: creating a child under a queue and submitting to that queue
// at the same moment can leave one workload on a queue that is no longer a
// leaf (each write checks the other with a read, not in one transaction).
//
// # What it must never do
//
//   - move a workload out of QUEUED other than to CANCELLED: dispatch and
//     agent events belong to the leader's scheduling loop (hub/dispatch);
//     for dispatched work the API only records a CancelRequested condition;
//   - store anything for a request that fails validation, or store a
//     workload without its idempotency record when a key was given (both
//     go in one etcd transaction);
//   - block the watch cache on a slow watcher, or crash the hub on a panic
//     in a handler (the recovery interceptor turns it into Internal);
//   - make scheduling decisions or talk to NATS.
package api
