package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "meridian-soak: %v\n", err)
		os.Exit(1)
	}
}

// run executes the meridian-soak command line.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := &cobra.Command{
		Use:           "meridian-soak",
		Short:         "Run Meridian's production shape (etcd and NATS clusters, several hubs, agents) on loopback",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(etcdMemberCommand(stderr), natsNodeCommand(stderr), upCommand(stdout, stderr), runCommand(stdout, stderr))
	root.SetArgs(append([]string{}, args...)) // never nil: cobra would read os.Args
	return root.ExecuteContext(ctx)
}

// logger is a server process's log: text on stderr, info and above.
func logger(stderr io.Writer, name string) *slog.Logger {
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("member", name)
}

// signalContext ends on SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
