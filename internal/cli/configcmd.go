package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"
)

func (a *app) configCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show and edit the configuration file: named contexts (hub, TLS, credentials)",
		Long: `Show and edit the configuration file, which holds named contexts like a
kubeconfig. A context names a hub and how to reach it: TLS settings, and
one credential (a token, a token file, or an exec credential plugin).

The file is --config, else $` + ConfigEnv + `, else
$XDG_CONFIG_HOME/meridian/config.yaml (~/.config/meridian/config.yaml).
Commands use its currentContext unless --context or $` + ContextEnv + ` names
another; flags and environment variables override the context's fields.`,
		Example: `  meridianctl config set-context prod --hub hub.example.com:7070 --ca ca.pem --token-file ~/.meridian/prod.token
  meridianctl config use-context prod
  meridianctl config get-contexts
  meridianctl config view`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErrorf("config: missing subcommand (view, get-contexts, use-context, set-context or delete-context)")
		},
	}
	cmd.AddCommand(a.configViewCommand(), a.configGetContextsCommand(), a.configUseContextCommand(),
		a.configSetContextCommand(), a.configDeleteContextCommand())
	return cmd
}

func (a *app) configViewCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "view",
		Short: "Print the configuration file, tokens redacted",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cf, err := a.loadConfig()
			if err != nil {
				return err
			}
			red := cf.cfg.redacted()
			y, err := yaml.Marshal(&red)
			if err != nil {
				return fmt.Errorf("encode configuration: %w", err)
			}
			if a.output == "json" {
				js, err := sigsyaml.YAMLToJSON(y)
				if err != nil {
					return fmt.Errorf("encode configuration: %w", err)
				}
				// YAMLToJSON escapes <, > and & as JSON may; a reader
				// should see <redacted>.
				js = []byte(strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(string(js)))
				var out bytes.Buffer
				if err := json.Indent(&out, js, "", "  "); err != nil {
					return fmt.Errorf("encode configuration: %w", err)
				}
				fmt.Fprintf(a.env.Stdout, "%s\n", out.Bytes())
				return nil
			}
			_, err = a.env.Stdout.Write(y)
			return err
		},
	}
}

// credentialKind says which credential a context uses, never its value.
func credentialKind(c *Context) string {
	switch {
	case c.Token != "":
		return "token"
	case c.TokenFile != "":
		return "token file " + c.TokenFile
	case !c.Exec.IsZero():
		return "exec " + c.Exec.Command
	case c.Cert != "":
		return "client certificate"
	}
	return "none"
}

func (a *app) configGetContextsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get-contexts",
		Short: "List the contexts; * marks the current one",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cf, err := a.loadConfig()
			if err != nil {
				return err
			}
			if a.output != "table" {
				type row struct {
					Name       string `json:"name"`
					Current    bool   `json:"current"`
					Hub        string `json:"hub"`
					TLS        bool   `json:"tls"`
					Credential string `json:"credential"`
				}
				rows := []row{}
				for i := range cf.cfg.Contexts {
					c := &cf.cfg.Contexts[i]
					rows = append(rows, row{c.Name, c.Name == cf.cfg.CurrentContext, dash(c.Hub), contextTLS(c), credentialKind(c)})
				}
				js, err := json.MarshalIndent(rows, "", "  ")
				if err != nil {
					return err
				}
				return a.writeJSONBytes(js)
			}
			if len(cf.cfg.Contexts) == 0 {
				fmt.Fprintf(a.env.Stderr, "no contexts in %s; add one with 'meridianctl config set-context NAME --hub HOST:PORT'\n", dash(cf.path))
				return nil
			}
			t := newTable(a.env.Stdout, "CURRENT", "NAME", "HUB", "TLS", "CREDENTIAL")
			for i := range cf.cfg.Contexts {
				c := &cf.cfg.Contexts[i]
				cur := ""
				if c.Name == cf.cfg.CurrentContext {
					cur = "*"
				}
				tlsText := "no"
				if contextTLS(c) {
					tlsText = "yes"
				}
				t.row(cur, c.Name, dash(c.Hub), tlsText, credentialKind(c))
			}
			return t.flush()
		},
	}
}

func contextTLS(c *Context) bool { return c.TLS || c.CA != "" || c.Cert != "" }

func (a *app) configUseContextCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "use-context NAME",
		Short: "Make NAME the current context",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cf, err := a.loadConfig()
			if err != nil {
				return err
			}
			if cf.cfg.find(args[0]) == nil {
				return &exitError{code: ExitNotFound, msg: fmt.Sprintf("no context named %q in %s ('meridianctl config get-contexts' lists them)", args[0], dash(cf.path))}
			}
			cf.cfg.CurrentContext = args[0]
			if err := cf.save(); err != nil {
				return err
			}
			fmt.Fprintf(a.env.Stdout, "switched to context %q\n", args[0])
			return nil
		},
	}
}

func (a *app) configSetContextCommand() *cobra.Command {
	var c Context
	var execEnv []string
	var use bool
	cmd := &cobra.Command{
		Use:   "set-context NAME [flags]",
		Short: "Create a context or change the fields given as flags (the file is written with mode 0600)",
		Long: `Create a context, or change the fields of an existing one that are given
as flags; other fields keep their values. A credential flag (--token-file,
--token, --exec-command) replaces the context's other credential.
Relative file names are made absolute. The file and its directory are
created when missing, readable by you only.`,
		Example: `  meridianctl config set-context prod --hub hub.example.com:7070 --ca ca.pem --token-file ~/.meridian/prod.token --use
  meridianctl config set-context sso --hub hub.example.com:7070 --tls --exec-command meridian-oidc-login --exec-arg --issuer=https://sso.example.com --exec-interactive
  meridianctl config set-context lab --hub 127.0.0.1:7070`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cf, err := a.loadConfig()
			if err != nil {
				return err
			}
			f := cmd.Flags()
			ctx := cf.cfg.find(args[0])
			created := ctx == nil
			if created {
				cf.cfg.Contexts = append(cf.cfg.Contexts, Context{Name: args[0]})
				ctx = &cf.cfg.Contexts[len(cf.cfg.Contexts)-1]
			}
			abs := func(p string) (string, error) {
				if p == "" || strings.HasPrefix(p, "~/") || filepath.IsAbs(p) {
					return p, nil
				}
				return filepath.Abs(p)
			}
			for _, s := range []struct {
				flag     string
				from, to *string
				path     bool
			}{
				{"hub", &c.Hub, &ctx.Hub, false},
				{"ca", &c.CA, &ctx.CA, true},
				{"cert", &c.Cert, &ctx.Cert, true},
				{"key", &c.Key, &ctx.Key, true},
				{"server-name", &c.ServerName, &ctx.ServerName, false},
			} {
				if !f.Changed(s.flag) {
					continue
				}
				v := *s.from
				if s.path {
					if v, err = abs(v); err != nil {
						return usageErrorf("--%s: %v", s.flag, err)
					}
				}
				*s.to = v
			}
			if f.Changed("tls") {
				ctx.TLS = c.TLS
			}
			switch {
			case f.Changed("token-file"):
				p, err := abs(c.TokenFile)
				if err != nil {
					return usageErrorf("--token-file: %v", err)
				}
				ctx.Token, ctx.TokenFile, ctx.Exec = "", p, ExecConfig{}
			case f.Changed("token"):
				ctx.Token, ctx.TokenFile, ctx.Exec = c.Token, "", ExecConfig{}
			case f.Changed("exec-command"):
				e := ExecConfig{Command: c.Exec.Command, Args: c.Exec.Args, Interactive: c.Exec.Interactive}
				for _, kv := range execEnv {
					k, v, ok := strings.Cut(kv, "=")
					if !ok || k == "" {
						return usageErrorf("--exec-env: want NAME=VALUE (got %q)", redactPair(kv))
					}
					e.Env = append(e.Env, ExecEnv{Name: k, Value: v})
				}
				ctx.Token, ctx.TokenFile, ctx.Exec = "", "", e
			case f.Changed("exec-arg") || f.Changed("exec-env") || f.Changed("exec-interactive"):
				return usageErrorf("--exec-arg, --exec-env and --exec-interactive go with --exec-command")
			}
			if use {
				cf.cfg.CurrentContext = ctx.Name
			}
			if errs := validateConfig(cf.path, &cf.cfg); len(errs) > 0 {
				return usageErrorf("context %s would be invalid:\n  %s", args[0], strings.ReplaceAll(errs.Error(), "\n", "\n  "))
			}
			if err := cf.save(); err != nil {
				return err
			}
			verb := "modified"
			if created {
				verb = "created"
			}
			fmt.Fprintf(a.env.Stdout, "context %q %s in %s\n", args[0], verb, cf.path)
			if use {
				fmt.Fprintf(a.env.Stdout, "switched to context %q\n", args[0])
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&c.Hub, "hub", "", "hub gRPC address host:port")
	fl.BoolVar(&c.TLS, "tls", false, "use TLS with the system roots")
	fl.StringVar(&c.CA, "ca", "", "CA bundle to verify the hub with (implies TLS)")
	fl.StringVar(&c.Cert, "cert", "", "client certificate for mutual TLS")
	fl.StringVar(&c.Key, "key", "", "private key of --cert")
	fl.StringVar(&c.ServerName, "server-name", "", "name to verify the hub's certificate against")
	fl.StringVar(&c.TokenFile, "token-file", "", "file holding a bearer token (read at each run)")
	fl.StringVar(&c.Token, "token", "", "bearer token to store in the file (prefer --token-file)")
	fl.StringVar(&c.Exec.Command, "exec-command", "", "exec credential plugin to run for a token")
	fl.StringArrayVar(&c.Exec.Args, "exec-arg", nil, "argument of the plugin (repeatable)")
	fl.StringArrayVar(&execEnv, "exec-env", nil, "NAME=VALUE set for the plugin (repeatable)")
	fl.BoolVar(&c.Exec.Interactive, "exec-interactive", false, "give the plugin meridianctl's stdin (it may prompt)")
	fl.BoolVar(&use, "use", false, "also make it the current context")
	return cmd
}

// redactPair shows NAME of a NAME=VALUE pair only.
func redactPair(kv string) string {
	if k, _, ok := strings.Cut(kv, "="); ok {
		return k + "=..."
	}
	if len(kv) > 8 {
		return kv[:4] + "..."
	}
	return kv
}

func (a *app) configDeleteContextCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete-context NAME",
		Short: "Delete a context",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cf, err := a.loadConfig()
			if err != nil {
				return err
			}
			i := -1
			for j := range cf.cfg.Contexts {
				if cf.cfg.Contexts[j].Name == args[0] {
					i = j
				}
			}
			if i < 0 {
				return &exitError{code: ExitNotFound, msg: fmt.Sprintf("no context named %q in %s", args[0], dash(cf.path))}
			}
			cf.cfg.Contexts = append(cf.cfg.Contexts[:i], cf.cfg.Contexts[i+1:]...)
			wasCurrent := cf.cfg.CurrentContext == args[0]
			if wasCurrent {
				cf.cfg.CurrentContext = ""
			}
			if err := cf.save(); err != nil {
				return err
			}
			fmt.Fprintf(a.env.Stdout, "deleted context %q from %s\n", args[0], cf.path)
			if wasCurrent {
				fmt.Fprintf(a.env.Stdout, "it was the current context; none is current now ('meridianctl config use-context NAME')\n")
			}
			return nil
		},
	}
}
