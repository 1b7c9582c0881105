// Package testetcd runs a real etcd member on 127.0.0.1 for tests that
// need an etcd the hub reaches over the network, as it would an external
// cluster: plaintext, or TLS that requires client certificates, and with
// etcd's authentication turned on the way docs/operators.md tells an
// operator to.
//
// It is for tests only: it never fsyncs, and it logs nothing.
package testetcd
