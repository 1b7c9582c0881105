package main

import (
	"context"
	"fmt"
	"io"
	"sort"
)

// subcommand is one meridian-sim subcommand. run parses its own flags from
// args and writes results to stdout, progress and diagnostics to stderr.
type subcommand struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var registry = map[string]subcommand{}

// register adds a subcommand; call it from an init function in the
// subcommand's own file. It panics on a duplicate name (programmer error).
func register(c subcommand) {
	if _, dup := registry[c.name]; dup {
		panic(fmt.Sprintf("meridian-sim: subcommand %q registered twice", c.name))
	}
	registry[c.name] = c
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: meridian-sim <subcommand> [flags]")
	fmt.Fprintln(w, "subcommands:")
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, registry[n].summary)
	}
	fmt.Fprintln(w, "run 'meridian-sim <subcommand> -h' for its flags")
}
