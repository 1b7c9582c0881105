package server

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A hub with a data directory keeps the id it made on its first start;
// one without uses host and pid; a damaged id file is an error naming it.
func TestDefaultHubIDIsKeptInTheDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	first, err := defaultHubID(dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := defaultHubID(dir)
	if err != nil || again != first {
		t.Fatalf("second start: %q, %v; want the first id %q", again, err, first)
	}
	if b, err := os.ReadFile(filepath.Join(dir, hubIDFile)); err != nil || strings.TrimSpace(string(b)) != first {
		t.Fatalf("id file holds %q, %v", b, err)
	}
	other, err := defaultHubID(filepath.Join(t.TempDir(), "other"))
	if err != nil || other == first {
		t.Fatalf("another data dir gave %q, %v; want a different id than %q", other, err, first)
	}
	if id, err := defaultHubID(""); err != nil || !strings.HasSuffix(id, "-"+strconv.Itoa(os.Getpid())) {
		t.Fatalf("no data dir: %q, %v; want host-pid", id, err)
	}
	if err := os.WriteFile(filepath.Join(dir, hubIDFile), []byte("two words\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := defaultHubID(dir); err == nil || !strings.Contains(err.Error(), hubIDFile) {
		t.Fatalf("damaged id file: err = %v, want one naming %s", err, hubIDFile)
	}
}
