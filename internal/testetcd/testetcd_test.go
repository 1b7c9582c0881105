package testetcd

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/internal/testpki"
)

func TestEtcdTLSMemberRequiresClientCertificatesAndAuth(t *testing.T) {
	x := Start(t, Options{PKI: testpki.New(t)})
	if !strings.HasPrefix(x.Endpoint, "https://127.0.0.1:") {
		t.Fatalf("endpoint %s", x.Endpoint)
	}
	x.EnableAuth(t, "root-pw", "meridian", "pw")
	cli := x.Client(t, "meridian", "pw")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/meridian/x", "1"); err != nil {
		t.Fatalf("meridian may write /meridian/: %v", err)
	}
	if _, err := cli.Put(ctx, "/other", "1"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("meridian wrote outside /meridian/: %v", err)
	}
}
