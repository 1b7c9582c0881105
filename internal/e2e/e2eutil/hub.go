package e2eutil

import (
	"context"
	"fmt"
	"log/slog"
	"os"
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
	stop   func()
}

// StartHub runs a hub with id on embedded etcd (fsync off: a test's data is
// thrown away) and NATS in a temporary data dir, with the short lease and
// cycle period the tests use, waits until /readyz answers, and dials it.
// Stop undoes all of it.
func StartHub(ctx context.Context, id string, log *slog.Logger) (*Hub, error) {
	dir, err := os.MkdirTemp("", "meridian-"+id+"-")
	if err != nil {
		return nil, err
	}
	srv, err := server.New(server.Config{
		DataDir: dir, HubID: id, Version: "e2e", UnsafeNoFsync: true,
		LeaderTTL: time.Second, SchedulePeriod: 100 * time.Millisecond, Logger: log.With("part", "hub"),
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start the hub: %w", err)
	}
	hctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(hctx) }()
	h := &Hub{Server: srv, GRPC: srv.Addrs().GRPC, REST: "http://" + srv.Addrs().HTTP}
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
	if err := localrun.WaitReady(ctx, h.REST+"/readyz", 30*time.Second); err != nil {
		h.Stop()
		return nil, err
	}
	if h.Conn, err = grpc.NewClient(h.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		h.Stop()
		return nil, err
	}
	h.WL = meridianv1.NewWorkloadServiceClient(h.Conn)
	h.CL = meridianv1.NewClusterServiceClient(h.Conn)
	h.Q = meridianv1.NewQueueServiceClient(h.Conn)
	return h, nil
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
