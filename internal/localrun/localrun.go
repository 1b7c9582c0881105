package localrun

import (
	"context"
	"fmt"
	"net/http"
	"time"

	agent "github.com/meridian-gpu/meridian/spoke-agent"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// Agent connects to natsURL as name (within connectCtx), runs the agent cfg
// describes on that connection until runCtx ends or the returned func is
// called, and then closes the connection. cfg.Bus is set here, with
// busOpts (tracing, credentials) on the connection; the connector stays
// open.
func Agent(connectCtx, runCtx context.Context, natsURL, name string, cfg agent.Config, busOpts ...natsbus.Option) (func(), error) {
	cctx, ccancel := context.WithTimeout(connectCtx, 10*time.Second)
	bus, err := natsbus.Connect(cctx, natsURL, append([]natsbus.Option{natsbus.WithName(name)}, busOpts...)...)
	ccancel()
	if err != nil {
		return nil, fmt.Errorf("agent %s: connect to NATS: %w", cfg.ClusterID, err)
	}
	cfg.Bus = bus
	a, err := agent.New(cfg)
	if err != nil {
		bus.Close()
		return nil, fmt.Errorf("agent %s: %w", cfg.ClusterID, err)
	}
	actx, acancel := context.WithCancel(runCtx)
	done := make(chan error, 1)
	go func() { done <- a.Run(actx) }()
	return func() {
		acancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		bus.Close()
	}, nil
}

// WaitReady waits until url answers 200 (a hub's /readyz), or limit
// passes, or ctx ends.
func WaitReady(ctx context.Context, url string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %s: %v", url, limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
