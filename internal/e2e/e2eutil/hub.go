package e2eutil

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meridian-gpu/meridian/hub/server"
	"github.com/meridian-gpu/meridian/internal/localrun"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// Hub is a hub an end-to-end fixture started, with a gRPC connection and
// the service clients the tests use.
type Hub struct {
	Server *server.Server
	Conn   *grpc.ClientConn
	WL     meridianv1.WorkloadServiceClient
	CL     meridianv1.ClusterServiceClient
	Q      meridianv1.QueueServiceClient
	GRPC   string // gRPC address
	REST   string // REST base URL, "http://host:port"
	// Token is the admin API token every client of the fixture presents
	// (Conn sends it with each call), and TokenFile the file the hub wrote
	// it to; both empty when the hub runs with authentication off.
	Token, TokenFile string
	stop             func()
}

// HubOption changes how StartHub runs the hub.
type HubOption func(*hubOptions)

type hubOptions struct{ authNone bool }

// AuthNone runs the hub with authentication off (every caller is
// local-admin), as an embedded loopback hub runs by default. The
// end-to-end tests run with authentication on, like meridian-hub; a test
// that needs it off must say why where it asks for it. None does today.
func AuthNone() HubOption { return func(o *hubOptions) { o.authNone = true } }

// StartHub runs a hub with id on embedded etcd (fsync off: a test's data is
// thrown away) and NATS in a temporary data dir, with the short lease and
// cycle period the tests use, waits until /readyz answers, and dials it.
// Authentication is on, as meridian-hub runs by default: the hub writes an
// admin API token at start, and Conn presents it with every call (CtlArgs
// and Authorize hand it to meridianctl and to REST requests). Stop undoes
// all of it.
func StartHub(ctx context.Context, id string, log *slog.Logger, opts ...HubOption) (*Hub, error) {
	var o hubOptions
	for _, opt := range opts {
		opt(&o)
	}
	dir, err := os.MkdirTemp("", "meridian-"+id+"-")
	if err != nil {
		return nil, err
	}
	sec := server.Security{Mode: server.AuthNone}
	tokenFile := ""
	if !o.authNone {
		tokenFile = filepath.Join(dir, "admin.token")
		sec = server.Security{Mode: server.AuthOn, AdminTokenFile: tokenFile}
	}
	srv, err := server.New(server.Config{
		DataDir: dir, HubID: id, Version: "e2e", UnsafeNoFsync: true,
		LeaderTTL: time.Second, SchedulePeriod: 100 * time.Millisecond, Logger: log.With("part", "hub"),
		Security: sec,
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start the hub: %w", err)
	}
	hctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(hctx) }()
	h := &Hub{Server: srv, GRPC: srv.Addrs().GRPC, REST: "http://" + srv.Addrs().HTTP, TokenFile: tokenFile}
	h.stop = func() {
		if h.Conn != nil {
			h.Conn.Close()
		}
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
		}
		_ = srv.Close()
		os.RemoveAll(dir)
	}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			h.Stop()
			return nil, fmt.Errorf("the hub's admin token: %w", err)
		}
		h.Token = strings.TrimSpace(string(b))
	}
	if err := localrun.WaitReady(ctx, h.REST+"/readyz", 30*time.Second); err != nil {
		h.Stop()
		return nil, err
	}
	if h.Conn, err = grpc.NewClient(h.GRPC, h.DialOptions()...); err != nil {
		h.Stop()
		return nil, err
	}
	h.WL = meridianv1.NewWorkloadServiceClient(h.Conn)
	h.CL = meridianv1.NewClusterServiceClient(h.Conn)
	h.Q = meridianv1.NewQueueServiceClient(h.Conn)
	return h, nil
}

// DialOptions are what a further gRPC client of the hub needs: plaintext
// on loopback, and the admin token with every call when authentication is
// on.
func (h *Hub) DialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if h.Token != "" {
		opts = append(opts, localrun.Bearer(h.Token))
	}
	return opts
}

// CtlArgs are meridianctl's global flags for this hub: its address and,
// when authentication is on, the admin token's file.
func (h *Hub) CtlArgs() []string {
	args := []string{"--hub", h.GRPC}
	if h.TokenFile != "" {
		args = append(args, "--token-file", h.TokenFile)
	}
	return args
}

// Authorize adds the admin token to a REST request.
func (h *Hub) Authorize(req *http.Request) {
	if h.Token != "" {
		req.Header.Set("Authorization", "Bearer "+h.Token)
	}
}

// Stop closes the connection, stops the hub and removes its data.
func (h *Hub) Stop() { h.stop() }

// StartAgent runs a spoke agent for cluster id on conn against the hub's
// NATS: with fast, at the short heartbeat, advertisement and change
// intervals the tests use, else at the agent's defaults. It returns the
// function that stops the agent and closes its NATS connection.
func (h *Hub) StartAgent(ctx context.Context, id string, conn agent.Connector, log *slog.Logger, fast bool) (func(), error) {
	cfg := agent.Config{ClusterID: id, Connector: conn, Logger: log.With("agent", id), Version: "e2e"}
	if fast {
		cfg.HeartbeatInterval, cfg.AdvertiseInterval, cfg.ChangeDelay = 300*time.Millisecond, time.Second, 20*time.Millisecond
	}
	// ctx bounds the fixture's start only; the agent runs until stopped.
	return localrun.Agent(ctx, context.Background(), h.Server.NATSURL(), "e2e-agent-"+id, cfg)
}
