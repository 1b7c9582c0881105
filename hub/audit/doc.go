// Package audit records who did what through the hub's API: every
// mutation and every refused request (denied or unauthenticated), with
// the time, the principal (user, groups, method), the RPC, the verb, the
// target, the request id and the result.
//
// A Recorder fans each event out to sinks: a JSON-lines writer (standard
// output or a file, like Kubernetes audit logs) written at once, and an
// etcd log written in batches in the background, with bounded retention
// (events older than MaxAge, or beyond the newest MaxEvents, are
// deleted), which ListAuditEvents and `meridianctl audit` read.
//
// It must never record a token, a password or a secret: callers hand it
// principals and reasons, never credentials, and Record refuses nothing
// but also never blocks the request path on etcd (a full queue drops the
// event from etcd, counts it and logs it; the JSON-lines sink still has
// it).
package audit
