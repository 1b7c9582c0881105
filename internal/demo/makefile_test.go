package demo

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// `go run` exits 1 when it sees Ctrl-C, even when the demo stopped
// cleanly, so `make demo-forever` stopped with Ctrl-C ended in "make: ***
// [demo-forever] Error 1". The demo targets run the built binary instead,
// whose clean stop exits 0.
func TestMakeDemoTargetsRunTheBinary(t *testing.T) {
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	target := regexp.MustCompile(`^([a-zA-Z0-9_-]+):`)
	cur, seen := "", map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := target.FindStringSubmatch(line); m != nil {
			cur = m[1]
			continue
		}
		if !strings.HasPrefix(line, "\t") || (cur != "demo" && !strings.HasPrefix(cur, "demo-")) {
			continue
		}
		seen[cur] = true
		if strings.Contains(line, " run ") && strings.Contains(line, "meridian-demo") {
			t.Errorf("make %s runs the demo with go run, which turns a clean Ctrl-C stop into exit 1: %s", cur, strings.TrimSpace(line))
		}
	}
	for _, want := range []string{"demo", "demo-forever", "demo-slurm", "demo-k8s"} {
		if !seen[want] {
			t.Errorf("the Makefile has no recipe for %s", want)
		}
	}
}
