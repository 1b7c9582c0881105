package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	hubconfig "github.com/meridian-gpu/meridian/hub/config"
	cc "github.com/meridian-gpu/meridian/internal/componentconfig"
)

// serveFunc is what the root command does with valid options: serve in
// main, record them in tests.
type serveFunc func(ctx context.Context, o *options, stdout, stderr io.Writer) error

// schema is the hub's configuration schema. hub/authz's permission check
// plugs in here through hubconfig.Options.ValidatePermission.
func schema() *cc.Schema[hubconfig.HubConfiguration] {
	return hubconfig.NewSchema(hubconfig.Options{})
}

// newCommand builds the meridian-hub command tree:
//
//	meridian-hub [flags]                  serve
//	meridian-hub --print-config [flags]   print the effective configuration
//	meridian-hub config validate [flags]  check a configuration and exit
//	meridian-hub config print [flags]     same as --print-config
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
				return printYAML(stdout, s, c)
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
	root.AddCommand(configCommand(loader, s, stdout))
	return root
}

func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected argument %q; meridian-hub takes flags, or the config command (see -h)", args[0])
	}
	return nil
}

func configCommand(loader *cc.Loader[hubconfig.HubConfiguration], s *cc.Schema[hubconfig.HubConfiguration], stdout io.Writer) *cobra.Command {
	cfg := &cobra.Command{
		Use:   "config",
		Short: "Check or print the hub's configuration",
		Args:  cobra.NoArgs,
	}
	cfg.AddCommand(&cobra.Command{
		Use:   "validate --config FILE [flags]",
		Short: "Validate the configuration (the file, the environment and any flags) and exit non-zero on any problem",
		Long: `Validate loads the configuration exactly as the hub would: the defaults, the
--config file, the environment variables and any flags given, and reports
every problem, each naming its field path. It reads no certificate or
credential file and starts nothing.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(*cobra.Command, []string) error {
			if _, err := loader.Load(); err != nil {
				return err
			}
			what := "the defaults, environment and flags"
			if f := loader.ConfigFile(); f != "" {
				what = f
			}
			fmt.Fprintf(stdout, "%s: valid %s\n", what, hubconfig.Kind)
			return nil
		},
	})
	cfg.AddCommand(&cobra.Command{
		Use:           "print [flags]",
		Short:         "Print the effective configuration as YAML, secrets redacted",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(*cobra.Command, []string) error {
			c, err := loader.Load()
			if err != nil {
				return err
			}
			return printYAML(stdout, s, c)
		},
	})
	return cfg
}

func printYAML(w io.Writer, s *cc.Schema[hubconfig.HubConfiguration], c *hubconfig.HubConfiguration) error {
	b, err := s.Marshal(c)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
