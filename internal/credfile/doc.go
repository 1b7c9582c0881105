// Package credfile reads the files that hold credentials and certificates
// (TLS material, passwords, tokens) with errors a person can act on: each
// names the file once and says what is wrong with it (missing, a
// directory, unreadable, empty, more than one line, no PEM certificate).
// The NATS and etcd clients of the hub and agent share it, so their flags
// report bad files the same way.
package credfile
