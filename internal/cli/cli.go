package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/meridian-gpu/meridian/internal/flowwindow"
	"github.com/meridian-gpu/meridian/internal/protofast"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// DefaultHub is the hub gRPC address used when neither --hub nor
// MERIDIAN_HUB is set. It matches meridian-hub's default gRPC listen
// address.
const DefaultHub = "127.0.0.1:7070"

// DefaultTimeout bounds each call to the hub unless --timeout says
// otherwise.
const DefaultTimeout = 10 * time.Second

// HubEnv is the environment variable that names the hub address.
const HubEnv = "MERIDIAN_HUB"

// maxRecvMsgBytes is the largest answer meridianctl accepts from the hub.
// gRPC's default, 4 MiB, is one page of a few workloads with large labels;
// list also halves its page size when a page is still too large. A
// variable so tests can lower it.
var maxRecvMsgBytes = 64 << 20

// Env is everything a command may touch outside itself.
type Env struct {
	// Stdin is read by `-f -`.
	Stdin io.Reader
	// Stdout receives results.
	Stdout io.Writer
	// Stderr receives errors and notes.
	Stderr io.Writer
	// Getenv looks up environment variables; nil means none are set.
	Getenv func(string) string
	// Now is the clock used for ages; nil means time.Now.
	Now func() time.Time
	// Environ is the environment handed to exec credential plugins (as
	// os.Environ); nil means they get only the variables their context
	// sets.
	Environ func() []string
}

// app is the state of one command-line invocation.
type app struct {
	env     Env
	hub     string
	timeout time.Duration
	output  string
	verbose bool
	conn    *grpc.ClientConn

	root        *cobra.Command
	configFlag  string
	contextName string
	flags       credFlags
	cfgFile     *configFile
	settings    *connSettings
	tokens      tokenSource
}

// credFlags are the connection flags; connSettings merges them with the
// environment and the context.
type credFlags struct {
	token, tokenFile string
	ca, cert, key    string
	serverName       string
	tls              bool
}

// Main runs one meridianctl command line (args without the program name)
// and returns the process exit code. Errors are written to env.Stderr.
func Main(ctx context.Context, args []string, env Env) int {
	if env.Stdin == nil {
		env.Stdin = strings.NewReader("")
	}
	if env.Stdout == nil {
		env.Stdout = io.Discard
	}
	if env.Stderr == nil {
		env.Stderr = io.Discard
	}
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.Now == nil {
		env.Now = time.Now
	}
	a := &app{env: env}
	defer a.close()
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		// Errors cobra produced itself: unknown commands, bad flags,
		// wrong argument counts.
		ee = &exitError{code: ExitUsage, msg: err.Error() + "\nRun 'meridianctl --help' for usage."}
	}
	fmt.Fprintf(env.Stderr, "error: %s\n", ee.msg)
	return ee.code
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "meridianctl",
		Short: "Command-line client of the Meridian multi-cluster GPU dispatcher",
		Long: `meridianctl submits gang workloads to a Meridian hub and shows where they
stand, why they are pending, and how queues and clusters are doing.

The hub address comes from --hub, else the ` + HubEnv + ` environment
variable, else the context's hub, else ` + DefaultHub + `.

Connecting securely: --ca FILE (or --tls for the system roots) turns on
TLS, --cert/--key present a client certificate, --token or --token-file
(or ` + TokenEnv + `) send a bearer token. A context in the configuration
file (` + "`meridianctl config`" + `, --context) holds all of these; flags win over
the environment, which wins over the context.

Exit codes:
  0    done
  1    unexpected failure (a hub fault, an odd or oversized answer)
  2    bad command line (unknown command or flag, missing argument, unreadable file)
  3    input rejected (field violations, failed precondition)
  4    not found
  5    conflict (already exists, or changed meanwhile; run again)
  6    hub unreachable, unavailable or too slow (see --timeout)
  7    the hub refused the credentials (unauthenticated or permission denied)
  130  interrupted

Start with:
  meridianctl queues                       the queue tree and its quotas
  meridianctl queue apply -f queues.yaml   create or update queues
  meridianctl submit -f workload.yaml      submit a workload
  meridianctl list                         workloads, newest first
  meridianctl explain ID                   why a workload is pending`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			switch a.output {
			case "table", "json", "yaml":
			default:
				return usageErrorf("-o/--output: unknown format %q (use table, json or yaml)", a.output)
			}
			if a.timeout <= 0 {
				return usageErrorf("--timeout: must be positive (got %s)", a.timeout)
			}
			return nil
		},
	}
	hub := a.env.Getenv(HubEnv)
	if hub == "" {
		hub = DefaultHub
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.hub, "hub", hub, "hub gRPC address host:port (env "+HubEnv+", else the context's hub)")
	pf.DurationVar(&a.timeout, "timeout", DefaultTimeout, "limit for each call to the hub")
	pf.StringVarP(&a.output, "output", "o", "table", "output format: table, json or yaml")
	pf.StringVar(&a.flags.token, "token", "", "bearer token to present (env "+TokenEnv+"); prefer --token-file, a command line is visible to other users")
	pf.StringVar(&a.flags.tokenFile, "token-file", "", "file holding the bearer token to present")
	pf.StringVar(&a.flags.ca, "ca", "", "CA bundle (PEM) to verify the hub with; implies TLS")
	pf.StringVar(&a.flags.cert, "cert", "", "client certificate (PEM) for mutual TLS, with --key; implies TLS")
	pf.StringVar(&a.flags.key, "key", "", "private key (PEM) of --cert")
	pf.BoolVar(&a.flags.tls, "tls", false, "use TLS, verifying the hub with the system roots (or --ca)")
	pf.StringVar(&a.flags.serverName, "tls-server-name", "", "name to verify the hub's certificate against, when it differs from the --hub host")
	pf.StringVar(&a.contextName, "context", "", "context of the configuration file to use (env "+ContextEnv+"; default its currentContext)")
	pf.StringVar(&a.configFlag, "config", "", "configuration file (env "+ConfigEnv+"; default $XDG_CONFIG_HOME/meridian/config.yaml)")
	pf.BoolVarP(&a.verbose, "verbose", "v", false, "print how the hub is reached (address, TLS, where credentials come from) on stderr")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return usageErrorf("%v\nRun 'meridianctl --help' for usage.", err)
	})
	root.AddCommand(
		a.submitCommand(),
		a.getCommand(),
		a.listCommand(),
		a.cancelCommand(),
		a.explainCommand(),
		a.watchCommand(),
		a.queuesCommand(),
		a.queueCommand(),
		a.clustersCommand(),
		a.clusterCommand(),
		a.versionCommand(),
		a.configCommand(),
		a.whoamiCommand(),
		a.tokenCommand(),
		a.auditCommand(),
	)
	a.root = root
	return root
}

// changed reports whether the user set the root flag name.
func (a *app) changed(name string) bool {
	if a.root == nil {
		return false
	}
	f := a.root.PersistentFlags().Lookup(name)
	return f != nil && f.Changed
}

// dial returns the connection to the hub, creating it on first use. The
// connection is lazy: nothing is contacted until the first call.
func (a *app) dial() (*grpc.ClientConn, error) {
	if a.conn != nil {
		return a.conn, nil
	}
	s, err := a.resolveSettings()
	if err != nil {
		return nil, err
	}
	if a.verbose {
		for _, l := range s.describe() {
			fmt.Fprintf(a.env.Stderr, "meridianctl: %s\n", l)
		}
	}
	opts := []grpc.DialOption{
		grpc.WithUserAgent("meridianctl/" + Version),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvMsgBytes)),
		protofast.DialOption(),
	}
	if s.tls {
		cfg, err := s.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if src := a.tokenSourceFor(s); src != nil {
		a.tokens = src
		opts = append(opts, grpc.WithPerRPCCredentials(&bearer{src: src, secure: s.tls}))
	}
	opts = append(opts, flowwindow.DialOptions()...)
	conn, err := grpc.NewClient(s.hub, opts...)
	if err != nil {
		return nil, usageErrorf("%s: %q is not a usable address: %v", s.hubFrom, s.hub, err)
	}
	a.conn = conn
	return conn, nil
}

// prepareToken fetches the token before a call, so that a failing plugin
// or an unreadable token file is reported as itself (exit code 7 or 2),
// not as a refused call. The token travels in the returned context to the
// call's credentials, so one call runs a plugin at most once.
func (a *app) prepareToken(ctx context.Context) (context.Context, error) {
	if a.tokens == nil {
		return ctx, nil
	}
	tok, err := a.tokens.Token(ctx)
	if err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, preparedTokenKey{}, tok), nil
}

// refreshable reports whether err is the hub refusing a token that may be
// renewed (from a plugin or a file): the call is then retried once with a
// fresh token. A call the hub refused as unauthenticated did nothing, so
// retrying it is safe even for a submit.
func (a *app) refreshable(err error) bool {
	return status.Code(err) == codes.Unauthenticated && a.tokens != nil && a.tokens.Refresh()
}

func (a *app) close() {
	if a.conn != nil {
		_ = a.conn.Close()
	}
}

// call runs fn with a context bounded by --timeout.
func (a *app) call(ctx context.Context, fn func(ctx context.Context, conn *grpc.ClientConn) error) error {
	conn, err := a.dial()
	if err != nil {
		return err
	}
	once := func() error {
		ctx, cancel := context.WithTimeout(ctx, a.timeout)
		defer cancel()
		ctx, err := a.prepareToken(ctx)
		if err != nil {
			return err
		}
		return fn(ctx, conn)
	}
	err = once()
	if a.refreshable(err) {
		if a.verbose {
			fmt.Fprintln(a.env.Stderr, "meridianctl: the hub refused the token; getting a fresh one and retrying once")
		}
		err = once()
	}
	return err
}

func (a *app) workloads(conn *grpc.ClientConn) meridianv1.WorkloadServiceClient {
	return meridianv1.NewWorkloadServiceClient(conn)
}

// exactArgs is cobra.ExactArgs with a message that names what is missing.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == len(names) {
			for i, v := range args {
				if strings.TrimSpace(v) == "" {
					return usageErrorf("%s: %s must not be empty", cmd.CommandPath(), names[i])
				}
			}
			return nil
		}
		if len(args) < len(names) {
			return usageErrorf("%s: missing %s\nUsage: %s", cmd.CommandPath(), strings.Join(names[len(args):], " "), cmd.UseLine())
		}
		return usageErrorf("%s: too many arguments (want %s, got %d)\nUsage: %s", cmd.CommandPath(), strings.Join(names, " "), len(args), cmd.UseLine())
	}
}

// noArgs rejects positional arguments.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("%s: takes no arguments (got %q)\nUsage: %s", cmd.CommandPath(), args[0], cmd.UseLine())
	}
	return nil
}
