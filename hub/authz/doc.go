// Package authz decides, purely, whether an authenticated principal may do
// something to the hub: the one authorization layer of DESIGN.md's
// "Identity and trust". It answers from request attributes only (who, which
// RPC, which queue path, workload, cluster or token), the way a
// kube-apiserver authorizer does, and returns a Decision that says Allow or
// Deny with a reason safe to show the caller, a detailed reason for the
// audit log, and the action and target to record.
//
// The model (docs/design/authorization.md states it in full):
//
//   - Global permissions (admin, queues.create, clusters.manage,
//     workloads.submit_any, workloads.cancel_any, workloads.view_all,
//     audit.read, tokens.create) come from a validated Config that maps
//     groups and users to permissions; an API token carries exactly the
//     permissions bound to it when it was minted.
//   - Per-queue access lists grant verbs (view, submit, cancel, update,
//     manage) to user:, group: and token: subjects, inherited down the
//     queue tree tenant/team/project.
//   - Quotas, weights and priority ceilings are set from above: they change
//     only with manage on a strict ancestor (queues.create for a top-level
//     queue). An access list changes only with manage on the queue or an
//     ancestor, never with queues.create alone.
//   - Table maps every gRPC method the hub serves to an action, a resource
//     kind and a function that extracts the target from the request.
//
// # Caller's duties
//
//  1. Load a Config (from the hub's configuration file) and call Validate;
//     its errors name the field path.
//  2. Build an Authorizer with New(cfg, queues), where queues is a snapshot
//     of every queue's access list and priority ceiling. When a queue's
//     access list or ceiling changes, build a new one with WithQueues and
//     swap it in atomically; an Authorizer is immutable and safe for
//     concurrent use.
//  3. For each request, Bind the authenticated Subject once (an empty
//     Subject is anonymous) and call Principal.AuthorizeMethod with the
//     gRPC full method name, the request message (nil for streams) and
//     the resolvers for workload and token ids. Refuse the call unless the
//     Decision is Allowed, answering with Decision.GRPCCode and
//     Decision.Reason; record an audit event with Decision.Action,
//     Decision.Target and Decision.Detail either way.
//  4. Filter every list and watch with Principal.Filter (per item
//     Visible(queuePath)); for ListAPITokens honour Decision.OwnOnly.
//  5. Use the same "not found" texts as this package (QueueNotFound,
//     WorkloadNotFound) so a caller cannot tell a hidden object from a
//     missing one.
//
// # What this package must never do
//
// It never performs I/O, never reads the clock, never uses randomness,
// never starts goroutines and holds no mutable global state: the same
// inputs always give the same Decision. It never panics on any input. It
// never puts another tenant's queue path, workload or access list in a
// caller-facing Reason. It never consults a handler's internals: only the
// request message, the resolvers and the snapshot it was built from.
package authz
