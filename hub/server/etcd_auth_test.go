package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/internal/testetcd"
	"github.com/meridian-gpu/meridian/internal/testpki"
)

func writePassword(t *testing.T, pw string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "etcd-password")
	if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestEtcdAuthHubWithUserAndPassword: a hub with --etcd-username and
// --etcd-password-file runs on an etcd with authentication on, its role
// limited to /meridian/, over TLS with client certificates; a wrong
// password, or none, stops it at start with a message that says so.
func TestEtcdAuthHubWithUserAndPassword(t *testing.T) {
	p := testpki.New(t)
	ext := testetcd.Start(t, testetcd.Options{PKI: p})
	ext.EnableAuth(t, "root-secret", "meridian", "meridian-secret")

	ec := mtls(p)
	ec.Username, ec.PasswordFile = "meridian", writePassword(t, "meridian-secret")
	s, _ := runHub(t, etcdHubConfig(t, "hub-auth", ext.Endpoint, ec, ""))
	waitReady(t, s)
	createAcmeQueues(t, "http://"+s.Addrs().HTTP)
	waitFor(t, 15*time.Second, "hub-auth leading", func() bool {
		_, ok := s.loop.Leading()
		return ok
	})

	t.Run("password from the environment", func(t *testing.T) {
		ec := mtls(p)
		ec.Username, ec.Password = "meridian", "meridian-secret"
		s, _ := runHub(t, etcdHubConfig(t, "hub-auth-env", ext.Endpoint, ec, ""))
		waitReady(t, s)
	})
	t.Run("wrong password", func(t *testing.T) {
		ec := mtls(p)
		ec.Username, ec.PasswordFile = "meridian", writePassword(t, "not-it")
		_, err := New(etcdHubConfig(t, "hub-wrong", ext.Endpoint, ec, ""))
		t.Log(err)
		if err == nil || !strings.Contains(err.Error(), `etcd refused user "meridian" (--etcd-username) with this password`) {
			t.Fatalf("error %v, want one saying the password was refused", err)
		}
	})
	t.Run("no user", func(t *testing.T) {
		// With client certificates etcd takes the certificate's common
		// name for the user; there is no user "client".
		_, err := New(etcdHubConfig(t, "hub-anonymous", ext.Endpoint, mtls(p), ""))
		if err == nil || !strings.Contains(err.Error(), `common name "client"`) || !strings.Contains(err.Error(), "give --etcd-username") {
			t.Fatalf("error %v, want one asking for --etcd-username", err)
		}
	})
}
