package repo

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRootHoldsGoModAndScripts(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"go.mod", filepath.Join("scripts", "k8s-up.sh")} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
}
