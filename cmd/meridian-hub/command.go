package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/meridian-gpu/meridian/hub/authz"
	hubconfig "github.com/meridian-gpu/meridian/hub/config"
	cc "github.com/meridian-gpu/meridian/internal/componentconfig"
)

// serveFunc is what the root command does with valid options: serve in
// main, record them in tests.
type serveFunc func(ctx context.Context, o *options, stdout, stderr io.Writer) error

// schema is the hub's configuration schema, with hub/authz checking the
// permission names of auth.authorization.
func schema() *cc.Schema[hubconfig.HubConfiguration] {
	return hubconfig.NewSchema(hubconfig.Options{
		ValidatePermission: func(p string) error {
			_, err := authz.ParsePermission(p)
			return err
		},
	})
}

// newCommand builds the meridian-hub command tree:
//
//	meridian-hub [flags]                  serve
//	meridian-hub --print-config [flags]   print the effective configuration
//	meridian-hub config validate [flags]  check a configuration and exit
//	meridian-hub config print [flags]     same as --print-config
//	meridian-hub snapshot save FILE       etcd snapshot of the federation
//	meridian-hub snapshot restore FILE    restore it as the embedded etcd
func newCommand(stdout, stderr io.Writer, serve serveFunc) *cobra.Command {
	s := schema()
	loader := cc.NewLoader(s)
	var printConfig bool
	root := &cobra.Command{
		Use:   "meridian-hub [flags]",
		Short: "Run the Meridian hub: API, leader election and scheduling loop",
		Long: `meridian-hub runs the Meridian hub: API, leader election and scheduling loop.
With no flags it embeds etcd and NATS under ./meridian-data and listens on loopback.

Settings come from the defaults, then the --config file (a ` + hubconfig.Kind + `),
then the environment variables shown, then the flags given: each layer wins
over the one before. See examples/config/hub.yaml and docs/operators.md.`,
		Args:          noArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loader.Load()
			if err != nil {
				return err
			}
			if printConfig {
				return s.Print(stdout, c)
			}
			o, err := newOptions(c)
			if err != nil {
				return err
			}
			return serve(cmd.Context(), o, stdout, stderr)
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetOut(stdout)
	root.SetErr(stderr)
	loader.AddFlags(root.PersistentFlags())
	root.Flags().BoolVar(&printConfig, "print-config", false, "print the effective configuration as YAML (secrets redacted) and exit")
	root.AddCommand(cc.Command(loader, stdout), snapshotCommand(loader, stdout))
	return root
}

func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected argument %q; meridian-hub takes flags, or the config command (see -h)", args[0])
	}
	return nil
}
