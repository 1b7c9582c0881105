package componentconfig

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Command returns the "config" command of a binary, with two
// subcommands that load the configuration exactly as the binary would
// (the defaults, the --config file, the environment, the flags given;
// the flags are the parent's persistent flags) and start nothing:
//
//	config validate   report every problem and exit non-zero, or say it is valid
//	config print      print the effective configuration, secrets redacted
func Command[T any](l *Loader[T], stdout io.Writer) *cobra.Command {
	s := l.schema
	cfg := &cobra.Command{
		Use:   "config",
		Short: "Validate or print the " + s.Kind,
		Args:  cobra.NoArgs,
	}
	cfg.AddCommand(&cobra.Command{
		Use:   "validate --config FILE [flags]",
		Short: "Validate the configuration and exit non-zero on any problem",
		Long: `Validate loads the configuration as the binary would: the defaults, the
--config file, the environment variables and any flags given; it reports
every problem, each naming its field path and where the value came from.
It reads no certificate or credential file and starts nothing.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(*cobra.Command, []string) error {
			if _, err := l.Load(); err != nil {
				return err
			}
			what := "the defaults, environment and flags"
			if f := l.ConfigFile(); f != "" {
				what = f
			}
			_, err := fmt.Fprintf(stdout, "%s: valid %s\n", what, s.Kind)
			return err
		},
	})
	cfg.AddCommand(&cobra.Command{
		Use:           "print [flags]",
		Short:         "Print the effective configuration as YAML, secrets redacted",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(*cobra.Command, []string) error {
			c, err := l.Load()
			if err != nil {
				return err
			}
			return s.Print(stdout, c)
		},
	})
	return cfg
}

// Print writes Marshal's YAML to w.
func (s *Schema[T]) Print(w io.Writer, cfg *T) error {
	b, err := s.Marshal(cfg)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// PrintError writes err for a person: a configuration error gets one
// indented line per problem under a count, anything else one line.
func PrintError(w io.Writer, binary string, err error) {
	if l, ok := AsErrorList(err); ok {
		noun := "problems"
		if len(l) == 1 {
			noun = "problem"
		}
		fmt.Fprintf(w, "%s: invalid configuration (%d %s):\n", binary, len(l), noun)
		for _, e := range l {
			fmt.Fprintln(w, "  "+e.Error())
		}
		return
	}
	fmt.Fprintf(w, "%s: %v\n", binary, err)
}
