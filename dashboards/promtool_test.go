package dashboards

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meridian-gpu/meridian/internal/e2e/e2eutil"
)

// findPromtool is $PROMTOOL or promtool on PATH; under
// MERIDIAN_REQUIRE_PROMTOOL=1 it asks scripts/promtool.sh, which installs
// Debian's prometheus package when it runs as root.
func findPromtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	if os.Getenv("MERIDIAN_REQUIRE_PROMTOOL") == "1" {
		out, err := exec.Command("bash", filepath.Join("..", "scripts", "promtool.sh")).Output()
		if p := strings.TrimSpace(string(out)); err == nil && p != "" {
			return p
		}
	}
	e2eutil.SkipOrFail(t, "PROMTOOL", "the promtool checks of dashboards/prometheus",
		"promtool is not installed (scripts/promtool.sh installs Debian's prometheus package as root, or set PROMTOOL)")
	return ""
}

// promtool check rules accepts every rule file, and promtool test rules
// passes every unit test file beside them.
func TestPromtool(t *testing.T) {
	promtool := findPromtool(t)
	ruleFiles, _ := filepath.Glob(filepath.Join("prometheus", "*.rules.yaml"))
	testFiles, _ := filepath.Glob(filepath.Join("prometheus", "*.rules_test.yaml"))
	if len(ruleFiles) == 0 || len(testFiles) != len(ruleFiles) {
		t.Fatalf("rule files %v and test files %v: every rule file needs its test file", ruleFiles, testFiles)
	}
	for _, args := range [][]string{append([]string{"check", "rules"}, ruleFiles...), append([]string{"test", "rules"}, testFiles...)} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if !strings.Contains(string(out), "SUCCESS") {
			t.Fatalf("promtool %s said no SUCCESS:\n%s", strings.Join(args, " "), out)
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// A rule file with a broken rule, and a unit test that expects the wrong
// alert, make promtool fail: the test above can fail.
func TestPromtoolCatchesBrokenRules(t *testing.T) {
	promtool := findPromtool(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.rules.yaml")
	if err := os.WriteFile(bad, []byte("groups:\n  - name: x\n    rules:\n      - alert: Broken\n        expr: sum(rate(x[5m])\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", bad).CombinedOutput(); err == nil {
		t.Fatalf("promtool check rules accepted a broken expression:\n%s", out)
	}
	rules, err := os.ReadFile(filepath.Join("prometheus", "meridian.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "meridian.rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	wrong := filepath.Join(dir, "wrong_test.yaml")
	if err := os.WriteFile(wrong, []byte(`rule_files: [meridian.rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'up{job="meridian-hub", instance="a"}'
        values: '1x10'
    alert_rule_test:
      - eval_time: 10m
        alertname: MeridianHubDown
        exp_alerts:
          - exp_labels: {severity: critical, job: meridian-hub, instance: a}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", wrong).CombinedOutput(); err == nil {
		t.Fatalf("promtool test rules passed a test that expects an alert for a hub that is up:\n%s", out)
	}
}
