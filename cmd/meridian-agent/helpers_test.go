package main

import (
	"context"
	"flag"
	"io"
)

// parseFlags runs the command line as main would, up to where it would
// serve, and returns the options it would serve with. When nothing would
// be served (-h, --print-config, a config command) it returns
// flag.ErrHelp.
func parseFlags(args []string, stderr io.Writer) (*options, error) {
	var got *options
	cmd := newCommand(io.Discard, stderr, func(_ context.Context, o *options, _ io.Writer) error {
		got = o
		return nil
	})
	cmd.SetArgs(append([]string{}, args...)) // never nil: cobra would read os.Args
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		return nil, err
	}
	if got == nil {
		return nil, flag.ErrHelp
	}
	return got, nil
}
