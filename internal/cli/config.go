package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/meridian-gpu/meridian/internal/componentconfig"
)

// The client configuration file: named contexts, like a kubeconfig.
const (
	// ConfigEnv names the configuration file, overriding the default path.
	ConfigEnv = "MERIDIAN_CONFIG"
	// ContextEnv names the context to use when --context is not given.
	ContextEnv = "MERIDIAN_CONTEXT"
	// TokenEnv holds a bearer token, overriding the context's credentials.
	TokenEnv = "MERIDIAN_TOKEN"

	configAPIVersion = "meridian.io/v1"
	configKind       = "Config"
)

// Config is the client configuration file.
type Config struct {
	APIVersion     string    `yaml:"apiVersion"`
	Kind           string    `yaml:"kind"`
	CurrentContext string    `yaml:"currentContext,omitempty"`
	Contexts       []Context `yaml:"contexts,omitempty"`
}

// Context is one named way to reach a hub: its address, how to verify
// it, and the credentials to present. Relative file paths are relative to
// the directory of the configuration file.
type Context struct {
	Name string `yaml:"name"`
	// Hub is host:port of the hub's gRPC API.
	Hub string `yaml:"hub,omitempty"`
	// TLS turns on TLS with the system roots; CA, Cert and Key imply it.
	TLS        bool   `yaml:"tls,omitempty"`
	CA         string `yaml:"ca,omitempty"`
	Cert       string `yaml:"cert,omitempty"`
	Key        string `yaml:"key,omitempty"`
	ServerName string `yaml:"serverName,omitempty"`
	// At most one of Token, TokenFile and Exec.
	Token     string     `yaml:"token,omitempty"`
	TokenFile string     `yaml:"tokenFile,omitempty"`
	Exec      ExecConfig `yaml:"exec,omitempty"`
}

// ExecConfig runs a credential plugin that prints an ExecCredential.
type ExecConfig struct {
	Command string    `yaml:"command,omitempty"`
	Args    []string  `yaml:"args,omitempty"`
	Env     []ExecEnv `yaml:"env,omitempty"`
	// Interactive plugins get meridianctl's standard input (to prompt).
	Interactive bool `yaml:"interactive,omitempty"`
}

// ExecEnv is one environment variable set for a plugin.
type ExecEnv struct {
	Name  string `yaml:"name"`
	Value string `yaml:"value"`
}

// IsZero lets yaml omit an empty exec block.
func (e ExecConfig) IsZero() bool {
	return e.Command == "" && len(e.Args) == 0 && len(e.Env) == 0 && !e.Interactive
}

var configSchema = &componentconfig.Schema[Config]{APIVersion: configAPIVersion, Kind: configKind}

// configFile is a loaded (or not yet existing) configuration file.
type configFile struct {
	path   string
	exists bool
	cfg    Config
}

// configPath is the configuration file to use: --config, else
// $MERIDIAN_CONFIG, else $XDG_CONFIG_HOME/meridian/config.yaml, else
// $HOME/.config/meridian/config.yaml; "" when none can be named.
func (a *app) configPath() string {
	if a.configFlag != "" {
		return a.configFlag
	}
	if p := a.env.Getenv(ConfigEnv); p != "" {
		return p
	}
	if x := a.env.Getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "meridian", "config.yaml")
	}
	if h := a.env.Getenv("HOME"); h != "" {
		return filepath.Join(h, ".config", "meridian", "config.yaml")
	}
	return ""
}

// loadConfig reads the configuration file once per run. A missing file
// is an empty configuration; a malformed one is an error naming the file,
// line and field.
func (a *app) loadConfig() (*configFile, error) {
	if a.cfgFile != nil {
		return a.cfgFile, nil
	}
	path := a.configPath()
	cf := &configFile{path: path, cfg: Config{APIVersion: configAPIVersion, Kind: configKind}}
	if path == "" {
		a.cfgFile = cf
		return cf, nil
	}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if a.configFlag != "" {
			return nil, usageErrorf("--config: %s does not exist", path)
		}
		a.cfgFile = cf
		return cf, nil
	case err != nil:
		return nil, usageErrorf("read configuration %s: %v", path, err)
	}
	cf.exists = true
	if errs := configSchema.Decode(path, data, &cf.cfg, nil); len(errs) > 0 {
		return nil, invalidErrorf("invalid configuration file (%d problem%s):\n  %s", len(errs), plural(len(errs)), strings.ReplaceAll(errs.Error(), "\n", "\n  "))
	}
	if errs := validateConfig(path, &cf.cfg); len(errs) > 0 {
		return nil, invalidErrorf("invalid configuration file (%d problem%s):\n  %s", len(errs), plural(len(errs)), strings.ReplaceAll(errs.Error(), "\n", "\n  "))
	}
	a.cfgFile = cf
	return cf, nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// validateConfig checks what the strict decoder cannot: names, duplicates,
// one credential per context.
func validateConfig(path string, c *Config) componentconfig.ErrorList {
	var errs componentconfig.ErrorList
	add := func(field, format string, args ...any) {
		errs = append(errs, &componentconfig.FieldError{Path: field, Detail: fmt.Sprintf(format, args...),
			Origin: componentconfig.Origin{Kind: componentconfig.FromFile, Name: path}})
	}
	seen := map[string]int{}
	for i, ctx := range c.Contexts {
		p := fmt.Sprintf("contexts[%d]", i)
		if strings.TrimSpace(ctx.Name) == "" {
			add(p+".name", "required: every context has a name")
		} else if j, dup := seen[ctx.Name]; dup {
			add(p+".name", "duplicate context %q (also contexts[%d])", ctx.Name, j)
		} else {
			seen[ctx.Name] = i
		}
		var creds []string
		if ctx.Token != "" {
			creds = append(creds, "token")
		}
		if ctx.TokenFile != "" {
			creds = append(creds, "tokenFile")
		}
		if !ctx.Exec.IsZero() {
			creds = append(creds, "exec")
			if strings.TrimSpace(ctx.Exec.Command) == "" {
				add(p+".exec.command", "required: the plugin to run")
			}
		}
		if len(creds) > 1 {
			add(p, "sets %s; choose one credential", strings.Join(creds, " and "))
		}
		if (ctx.Cert == "") != (ctx.Key == "") {
			add(p+".cert", "cert and key go together (a client certificate needs its key)")
		}
		if strings.HasPrefix(ctx.Hub, "http://") || strings.HasPrefix(ctx.Hub, "https://") {
			add(p+".hub", "%q is a URL; give host:port of the hub's gRPC API", ctx.Hub)
		}
	}
	if c.CurrentContext != "" {
		if _, ok := seen[c.CurrentContext]; !ok {
			add("currentContext", "no context is named %q", c.CurrentContext)
		}
	}
	return errs
}

// find returns the context named name, or nil.
func (c *Config) find(name string) *Context {
	for i := range c.Contexts {
		if c.Contexts[i].Name == name {
			return &c.Contexts[i]
		}
	}
	return nil
}

// resolvePath makes a path from the file relative to the file's
// directory; "~/" is the home directory.
func (a *app) resolvePath(cf *configFile, p string) string {
	if p == "" {
		return ""
	}
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if h := a.env.Getenv("HOME"); h != "" {
			return filepath.Join(h, rest)
		}
	}
	if filepath.IsAbs(p) || cf == nil || cf.path == "" {
		return p
	}
	return filepath.Join(filepath.Dir(cf.path), p)
}

// save writes the configuration with mode 0600, creating its directory,
// through a temporary file so a crash leaves the old file whole.
func (cf *configFile) save() error {
	if cf.path == "" {
		return usageErrorf("no configuration file: set --config, %s, XDG_CONFIG_HOME or HOME", ConfigEnv)
	}
	cf.cfg.APIVersion, cf.cfg.Kind = configAPIVersion, configKind
	data, err := yaml.Marshal(&cf.cfg)
	if err != nil {
		return fmt.Errorf("encode configuration: %w", err)
	}
	dir := filepath.Dir(cf.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return &exitError{code: ExitError, msg: fmt.Sprintf("create %s: %v", dir, err), err: err}
	}
	tmp, err := os.CreateTemp(dir, ".config-*.yaml")
	if err != nil {
		return &exitError{code: ExitError, msg: fmt.Sprintf("write %s: %v", cf.path, err), err: err}
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err == nil {
		_, err = tmp.Write(data)
		if err == nil {
			err = tmp.Close()
		}
		if err == nil {
			err = os.Rename(tmp.Name(), cf.path)
		}
		if err != nil {
			return &exitError{code: ExitError, msg: fmt.Sprintf("write %s: %v", cf.path, err), err: err}
		}
	} else {
		tmp.Close()
		return &exitError{code: ExitError, msg: fmt.Sprintf("write %s: %v", cf.path, err), err: err}
	}
	cf.exists = true
	return nil
}

// redacted is a copy of the configuration with every token replaced.
func (c *Config) redacted() Config {
	out := *c
	out.Contexts = make([]Context, len(c.Contexts))
	for i, ctx := range c.Contexts {
		if ctx.Token != "" {
			ctx.Token = componentconfig.Redacted
		}
		ctx.Exec.Env = append([]ExecEnv(nil), ctx.Exec.Env...)
		for j := range ctx.Exec.Env {
			if looksSecret(ctx.Exec.Env[j].Name) {
				ctx.Exec.Env[j].Value = componentconfig.Redacted
			}
		}
		out.Contexts[i] = ctx
	}
	return out
}

// looksSecret reports whether an environment variable's name suggests it
// holds a secret, so config view does not print its value.
func looksSecret(name string) bool {
	n := strings.ToUpper(name)
	for _, s := range []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}
