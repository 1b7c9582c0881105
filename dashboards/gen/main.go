package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/meridian-gpu/meridian/dashboards"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", filepath.Join("dashboards", "grafana"), "folder the dashboard JSON files are written to")
	check := fs.Bool("check", false, "compare with the files in -out instead of writing; exit 1 when any is stale")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gen: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	stale, err := generate(*out, *check)
	if err != nil {
		fmt.Fprintln(stderr, "gen:", err)
		return 1
	}
	if *check {
		if len(stale) > 0 {
			fmt.Fprintf(stderr, "gen: dashboards are out of date (run make dashboards and commit the result):\n  %s\n", strings.Join(stale, "\n  "))
			return 1
		}
		fmt.Fprintf(stdout, "gen: dashboards in %s are up to date\n", *out)
		return 0
	}
	fmt.Fprintf(stdout, "gen: wrote the dashboards to %s\n", *out)
	return 0
}

// generate writes (or, with check, compares) every board in dir and
// returns what is stale: files that differ or are missing, and JSON files
// no board produces.
func generate(dir string, check bool) ([]string, error) {
	boards, err := dashboards.Boards()
	if err != nil {
		return nil, err
	}
	if !check {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	want := map[string]bool{}
	var stale []string
	for _, b := range boards {
		want[b.File] = true
		data, err := b.JSON()
		if err != nil {
			return nil, err
		}
		p := filepath.Join(dir, b.File)
		have, err := os.ReadFile(p)
		if err == nil && bytes.Equal(have, data) {
			continue
		}
		if check {
			why := "differs from the generated board"
			if os.IsNotExist(err) {
				why = "is missing"
			}
			stale = append(stale, p+" "+why)
			continue
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return nil, err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") && !want[e.Name()] {
			p := filepath.Join(dir, e.Name())
			if check {
				stale = append(stale, p+" is no longer generated (delete it)")
			} else if err := os.Remove(p); err != nil {
				return nil, err
			}
		}
	}
	sort.Strings(stale)
	return stale, nil
}
