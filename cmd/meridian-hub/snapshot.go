package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-gpu/meridian/hub/backup"
	hubconfig "github.com/meridian-gpu/meridian/hub/config"
	cc "github.com/meridian-gpu/meridian/internal/componentconfig"
)

// snapshotCommand is `meridian-hub snapshot save|restore`: an etcd
// snapshot of a running federation, and its restore into a fresh data
// directory (docs/operators.md, "Backup and restore").
func snapshotCommand(loader *cc.Loader[hubconfig.HubConfiguration], stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save an etcd snapshot of the federation, or restore one",
	}
	save := &cobra.Command{
		Use:   "save FILE",
		Short: "Write a snapshot of the hub's etcd to FILE (--etcd-endpoints; for the embedded etcd its loopback URL)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := loader.Load()
			if err != nil {
				return err
			}
			o, err := newOptions(c)
			if err != nil {
				return err
			}
			ecfg, err := o.cfg.EtcdClient.ClientConfig(c.Etcd.Endpoints, slog.New(slog.DiscardHandler))
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Minute)
			defer cancel()
			fmt.Fprintf(stdout, "snapshot: asking %v\n", c.Etcd.Endpoints)
			info, err := backup.Save(ctx, ecfg, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "snapshot: saved %s: %d bytes, %d keys, revision %d (etcd %s)\n", info.Path, info.Bytes, info.Keys, info.Revision, info.Version)
			return nil
		},
	}
	restore := &cobra.Command{
		Use:   "restore FILE",
		Short: "Restore FILE as the embedded etcd of --data-dir (which must hold no etcd yet); then start the hub with --after-restore",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := loader.Load()
			if err != nil {
				return err
			}
			info, err := backup.RestoreEmbedded(args[0], c.DataDir)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "snapshot: restored %d keys into %s (revision now %d)\n", info.Keys, info.Path, info.Revision)
			fmt.Fprintf(stdout, "next: meridian-hub --data-dir %s --after-restore (the agents' work started after the snapshot is adopted, not launched again)\n", c.DataDir)
			return nil
		},
	}
	cmd.AddCommand(save, restore)
	return cmd
}
