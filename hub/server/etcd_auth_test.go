package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meridian-gpu/meridian/internal/testpki"
)

// enableEtcdAuth turns authentication on in the etcd at endpoint the way
// docs/operators.md tells an operator to: a root user, and a meridian
// user whose role may read and write /meridian/ and nothing else.
func enableEtcdAuth(t *testing.T, endpoint string, tlsCfg EtcdClient, password string) {
	t.Helper()
	cfg := clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second}
	if tlsCfg.TLS() {
		cfg.TLS = mustTLS(t, tlsCfg)
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "root-secret"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "meridian"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "meridian", "/meridian/", clientv3.GetPrefixRangeEnd("/meridian/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, "meridian", password); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "meridian", "meridian"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for i, f := range steps {
		if err := f(); err != nil {
			t.Fatalf("auth setup step %d: %v", i+1, err)
		}
	}
}

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
	ext := startExternalEtcd(t, etcdOpts{pki: p})
	enableEtcdAuth(t, ext.endpoint, mtls(p), "meridian-secret")

	ec := mtls(p)
	ec.Username, ec.PasswordFile = "meridian", writePassword(t, "meridian-secret")
	s, _ := runHub(t, etcdHubConfig(t, "hub-auth", ext.endpoint, ec, ""))
	waitReady(t, s)
	createAcmeQueues(t, "http://"+s.Addrs().HTTP)
	waitFor(t, 15*time.Second, "hub-auth leading", func() bool {
		_, ok := s.loop.Leading()
		return ok
	})

	t.Run("password from the environment", func(t *testing.T) {
		ec := mtls(p)
		ec.Username, ec.Password = "meridian", "meridian-secret"
		s, _ := runHub(t, etcdHubConfig(t, "hub-auth-env", ext.endpoint, ec, ""))
		waitReady(t, s)
	})
	t.Run("wrong password", func(t *testing.T) {
		ec := mtls(p)
		ec.Username, ec.PasswordFile = "meridian", writePassword(t, "not-it")
		_, err := New(etcdHubConfig(t, "hub-wrong", ext.endpoint, ec, ""))
		t.Log(err)
		if err == nil || !strings.Contains(err.Error(), `etcd refused user "meridian" (--etcd-username) with this password`) {
			t.Fatalf("error %v, want one saying the password was refused", err)
		}
	})
	t.Run("no user", func(t *testing.T) {
		// With client certificates etcd takes the certificate's common
		// name for the user; there is no user "client".
		_, err := New(etcdHubConfig(t, "hub-anonymous", ext.endpoint, mtls(p), ""))
		if err == nil || !strings.Contains(err.Error(), `common name "client"`) || !strings.Contains(err.Error(), "give --etcd-username") {
			t.Fatalf("error %v, want one asking for --etcd-username", err)
		}
	})
}
