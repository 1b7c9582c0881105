package helmtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestObjects(t *testing.T) {
	for name, tc := range map[string]struct {
		manifest string
		kinds    []string
		err      string
	}{
		"two documents and empty ones": {
			manifest: "---\n# Source: a\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\n---\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: b\n",
			kinds:    []string{"ServiceAccount", "Secret"},
		},
		"nothing":       {manifest: "", kinds: nil},
		"no kind":       {manifest: "apiVersion: v1\nmetadata:\n  name: a\n", err: "document 0: no kind"},
		"not a mapping": {manifest: "apiVersion: v1\nkind: [\n", err: "document 0"},
	} {
		t.Run(name, func(t *testing.T) {
			objs, err := Objects([]byte(tc.manifest))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.GetKind())
			}
			if strings.Join(kinds, ",") != strings.Join(tc.kinds, ",") {
				t.Fatalf("kinds = %v, want %v", kinds, tc.kinds)
			}
		})
	}
}

func TestFindHelm(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "bin", "helm")
	if err := os.MkdirAll(filepath.Dir(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", t.TempDir())
	for name, tc := range map[string]struct {
		helmEnv, tools string
		want, err      string
	}{
		"MERIDIAN_HELM wins":    {helmEnv: fake, tools: t.TempDir(), want: fake},
		"MERIDIAN_HELM missing": {helmEnv: filepath.Join(dir, "nope"), err: "MERIDIAN_HELM"},
		"the tools cache":       {tools: dir, want: fake},
		"nowhere":               {tools: t.TempDir(), err: "scripts/helm.sh"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("MERIDIAN_HELM", tc.helmEnv)
			t.Setenv("MERIDIAN_TOOLS", tc.tools)
			got, err := FindHelm()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("FindHelm() = %q, %v; want an error naming %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("FindHelm() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
