package simcluster

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

//go:embed examples/*.yaml
var examplesFS embed.FS

// ExampleNames lists the built-in example clusters (file names without
// .yaml), sorted: the same files as in examples/.
func ExampleNames() []string {
	entries, _ := fs.ReadDir(examplesFS, "examples")
	var out []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Example parses a built-in example cluster by name (see ExampleNames), so
// that the demo and tests need no file paths.
func Example(name string) (*Config, error) {
	b, err := examplesFS.ReadFile("examples/" + name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("simcluster: no example %q (have %s)", name, strings.Join(ExampleNames(), ", "))
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("simcluster: example %s: %w", name, err)
	}
	return c, nil
}
