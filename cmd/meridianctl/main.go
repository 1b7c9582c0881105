package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/meridian-gpu/meridian/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], cli.Env{
		Stdin:   os.Stdin,
		Stdout:  os.Stdout,
		Stderr:  os.Stderr,
		Getenv:  os.Getenv,
		Now:     time.Now,
		Environ: os.Environ,
	})
	stop()
	os.Exit(code)
}
