package natsbus

import (
	"strings"
	"testing"
	"time"
)

func TestCredentialExpiry(t *testing.T) {
	op := newOperatorSetup(t)
	exp := time.Now().Add(36 * time.Hour).Truncate(time.Second)
	got, ok, err := CredsFileExpiry(credsFile(t, op.account, exp))
	if err != nil || !ok || !got.Equal(exp) {
		t.Fatalf("CredsFileExpiry = %v, %v, %v; want %v", got, ok, err, exp)
	}
	if got, ok, err := CredsFileExpiry(credsFile(t, op.account, time.Time{})); err != nil || ok {
		t.Fatalf("a JWT without exp: CredsFileExpiry = %v, %v, %v; want no expiry", got, ok, err)
	}
	if _, _, err := CredsFileExpiry(writeFile(t, "bad.creds", "not a creds file")); err == nil || !strings.Contains(err.Error(), "bad.creds") {
		t.Fatalf("a file that is not a creds file: err = %v, want one naming the file", err)
	}
	ca := newCA(t, "ca")
	_, certFile, _ := ca.issue(t, "agent")
	na, err := CertFileExpiry(certFile)
	if err != nil || na.Before(time.Now().Add(50*time.Minute)) || na.After(time.Now().Add(61*time.Minute)) {
		t.Fatalf("CertFileExpiry = %v, %v; want the leaf's NotAfter, an hour from now", na, err)
	}
	if _, err := CertFileExpiry(writeFile(t, "empty.pem", "")); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("an empty PEM file: err = %v", err)
	}
	if _, err := CertFileExpiry("/nonexistent/agent.crt"); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("a missing file: err = %v", err)
	}
}
