package api

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The grpcurl command docs/api.md gives for a hub without reflection must
// find every file the API's protos import: it once left out
// third_party/openapiv2 and failed on the OpenAPI annotations.
func TestDocumentedGRPCurlImportPathsResolve(t *testing.T) {
	const root = "../.."
	doc, err := os.ReadFile(filepath.Join(root, "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(string(doc), "\n") {
		if strings.Contains(l, "grpcurl") && strings.Contains(l, "-import-path") {
			line = l
			break
		}
	}
	if line == "" {
		t.Fatal("docs/api.md has no grpcurl command with -import-path")
	}
	var paths, protos []string
	for _, m := range regexp.MustCompile(`-(import-path|proto) (\S+)`).FindAllStringSubmatch(line, -1) {
		if m[1] == "import-path" {
			paths = append(paths, m[2])
		} else {
			protos = append(protos, m[2])
		}
	}
	importRE := regexp.MustCompile(`(?m)^import (?:public |weak )?"([^"]+)";`)
	seen := map[string]bool{}
	var visit func(name, from string)
	visit = func(name, from string) {
		if seen[name] || strings.HasPrefix(name, "google/protobuf/") { // grpcurl has these built in
			return
		}
		seen[name] = true
		for _, p := range paths {
			b, err := os.ReadFile(filepath.Join(root, p, name))
			if err != nil {
				continue
			}
			for _, m := range importRE.FindAllStringSubmatch(string(b), -1) {
				visit(m[1], name)
			}
			return
		}
		t.Errorf("%s (imported by %s) is under none of the documented import paths %v: %s", name, from, paths, line)
	}
	for _, p := range protos {
		visit(p, "the command line")
	}
	if !seen["meridian/v1/workload.proto"] || !seen["google/rpc/error_details.proto"] {
		t.Errorf("the command loads %v; want the API and the error details", protos)
	}
}

// Issue 9's documentation slips: docs/api.md showed "replayed": false,
// which the API never sends (unset fields are left out), and the README's
// curl URL was unquoted, so zsh read its '?' as a glob.
func TestDocsShowWhatTheAPISends(t *testing.T) {
	const root = "../.."
	api, err := os.ReadFile(filepath.Join(root, "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	if regexp.MustCompile(`"replayed":\s*false`).Match(api) {
		t.Error(`docs/api.md shows "replayed": false; the API leaves unset fields out`)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	bare := regexp.MustCompile(`[^'"]https?://`)
	for _, l := range strings.Split(string(readme), "\n") {
		if strings.Contains(l, "curl ") && bare.MatchString(l) {
			t.Errorf("README: quote the URL (zsh globs '?'): %s", l)
		}
	}
}
