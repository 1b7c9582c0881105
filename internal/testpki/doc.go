// Package testpki makes a throwaway certificate authority with a server
// and a client certificate for tests of TLS connections on loopback. It is
// for tests only: keys are P-256, valid for two hours, and written under
// the test's temporary directory.
package testpki
