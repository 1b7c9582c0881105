// Package backup saves an etcd snapshot of a running federation and
// restores one into a fresh data directory, for meridian-hub's snapshot
// commands. A restored hub must start with --after-restore (hub/dispatch,
// adopt.go): the clusters may run work the snapshot does not know.
// docs/operators.md, "Backup and restore", has the procedure.
package backup
