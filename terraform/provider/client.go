package provider

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/meridian-gpu/meridian/internal/cli"
	"github.com/meridian-gpu/meridian/internal/flowwindow"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// hubClient is what resources and data sources get from the provider: the
// hub's service clients over one connection.
type hubClient struct {
	endpoint string
	conn     *grpc.ClientConn
	queues   meridianv1.QueueServiceClient
	clusters meridianv1.ClusterServiceClient
	admin    meridianv1.AdminServiceClient
	wl       meridianv1.WorkloadServiceClient
}

// connSettings is the provider configuration after defaults and the
// environment were applied.
type connSettings struct {
	endpoint   string
	token      string
	caFile     string
	caPEM      string
	tls        bool
	serverName string
	version    string
}

// useTLS reports whether the connection is TLS: asked for, or implied by a
// CA.
func (s connSettings) useTLS() bool { return s.tls || s.caFile != "" || s.caPEM != "" }

// check refuses what meridianctl refuses: a token in plaintext to a hub
// that is not on loopback.
func (s connSettings) check() error {
	if strings.TrimSpace(s.endpoint) == "" {
		return fmt.Errorf("endpoint is empty: give host:port of the hub's gRPC API")
	}
	if strings.HasPrefix(s.endpoint, "http://") || strings.HasPrefix(s.endpoint, "https://") {
		return fmt.Errorf("endpoint %q is a URL; give host:port of the hub's gRPC API, for example %s", s.endpoint, cli.DefaultHub)
	}
	if s.caFile != "" && s.caPEM != "" {
		return fmt.Errorf("ca_file and ca_pem are both set; give one")
	}
	if s.token != "" && !s.useTLS() && !cli.IsLoopback(s.endpoint) {
		return fmt.Errorf("refusing to send the token over plaintext to %s: it is not a loopback address; set ca_file (or %s), ca_pem, or tls = true", s.endpoint, envCAFile)
	}
	return nil
}

// tlsConfig builds the client TLS configuration.
func (s connSettings) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.serverName}
	pem := []byte(s.caPEM)
	from := "ca_pem"
	if s.caFile != "" {
		b, err := os.ReadFile(s.caFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: read the CA bundle: %w", err)
		}
		pem, from = b, "ca_file "+s.caFile
	}
	if len(pem) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", from)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// bearer sends the API token with every call; it requires TLS unless the
// hub is on loopback (connSettings.check allowed that case).
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.secure }

var _ credentials.PerRPCCredentials = bearer{}

// dial connects lazily: nothing is contacted until the first call.
func dial(s connSettings) (*hubClient, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{grpc.WithUserAgent("terraform-provider-meridian/" + s.version)}
	if s.useTLS() {
		cfg, err := s.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if s.token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{token: s.token, secure: s.useTLS()}))
	}
	opts = append(opts, flowwindow.DialOptions()...)
	conn, err := grpc.NewClient(s.endpoint, opts...)
	if err != nil {
		return nil, fmt.Errorf("endpoint %q is not a usable address: %w", s.endpoint, err)
	}
	return &hubClient{
		endpoint: s.endpoint,
		conn:     conn,
		queues:   meridianv1.NewQueueServiceClient(conn),
		clusters: meridianv1.NewClusterServiceClient(conn),
		admin:    meridianv1.NewAdminServiceClient(conn),
		wl:       meridianv1.NewWorkloadServiceClient(conn),
	}, nil
}

// abortedRetries bounds how often a call the hub aborted is tried again.
const abortedRetries = 5

// retryAborted runs call again while the hub answers Aborted: the hub
// aborts a write that lost a race on etcd (siblings created at once
// rewrite their parent) and has then written nothing, so trying again is
// safe. Terraform creates independent queues in parallel, so this is the
// common case, not an exotic one.
func retryAborted(ctx context.Context, call func() error) error {
	var err error
	for attempt := 1; ; attempt++ {
		err = call()
		if status.Code(err) != codes.Aborted || attempt == abortedRetries {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt*attempt) * 50 * time.Millisecond):
		}
	}
}
