package embednats

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestStartRejectsBadConfig(t *testing.T) {
	dir := t.TempDir()
	tests := map[string]struct {
		cfg       Config
		wantField string
	}{
		"missing store dir":  {Config{}, "StoreDir"},
		"negative port":      {Config{StoreDir: dir, Port: -1}, "Port"},
		"port too large":     {Config{StoreDir: dir, Port: 1 << 17}, "Port"},
		"negative max store": {Config{StoreDir: dir, MaxStoreBytes: -1}, "MaxStoreBytes"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, err := Start(tc.cfg)
			if err == nil {
				_ = s.Close()
				t.Fatalf("Start(%+v) succeeded, want an error naming %s", tc.cfg, tc.wantField)
			}
			if !strings.Contains(err.Error(), tc.wantField) {
				t.Fatalf("error %q does not name field %s", err, tc.wantField)
			}
		})
	}
}

func publishN(t *testing.T, ctx context.Context, url string, n int) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := js.Publish(ctx, "t.x", []byte(fmt.Sprintf("m%d", i))); err != nil {
			t.Fatal(err)
		}
	}
}

func streamMsgs(t *testing.T, ctx context.Context, url string) uint64 {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "T")
	if err != nil {
		t.Fatalf("stream T after restart: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestMessagesSurviveCloseAndStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dir := t.TempDir()
	s, err := Start(Config{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first start: %s at %s", s.StartupTime(), s.ClientURL())
	if !strings.HasPrefix(s.ClientURL(), "nats://127.0.0.1:") {
		t.Fatalf("ClientURL %q is not loopback", s.ClientURL())
	}
	if !s.WaitReady(time.Second) {
		t.Fatal("WaitReady false on a running server")
	}
	publishN(t, ctx, s.ClientURL(), 25)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if s.WaitReady(10 * time.Millisecond) {
		t.Fatal("WaitReady true on a closed server")
	}

	s2, err := Start(Config{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	t.Logf("start on existing store: %s", s2.StartupTime())
	if got := streamMsgs(t, ctx, s2.ClientURL()); got != 25 {
		t.Fatalf("after restart stream holds %d messages, want 25", got)
	}
}

func TestRestartKeepsPortAndClientsReconnect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := Start(Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	url := s.ClientURL()
	reconnected := make(chan struct{}, 1)
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	publishN(t, ctx, url, 3)
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart: %s", s.StartupTime())
	if s.ClientURL() != url {
		t.Fatalf("URL moved from %s to %s", url, s.ClientURL())
	}
	select {
	case <-reconnected:
	case <-ctx.Done():
		t.Fatal("client did not reconnect after restart")
	}
	if got := streamMsgs(t, ctx, url); got != 3 {
		t.Fatalf("after restart stream holds %d messages, want 3", got)
	}
}
