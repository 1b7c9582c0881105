package embednats

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// DefaultReadyTimeout bounds how long Start waits for the server to accept
// connections.
const DefaultReadyTimeout = 10 * time.Second

// Config says how to start the embedded NATS server.
type Config struct {
	// StoreDir holds JetStream's file store. Required.
	StoreDir string
	// Port is the loopback client port; 0 picks a random free port.
	Port int
	// Logger receives the server's warnings and errors; nil drops them.
	Logger *slog.Logger
	// ReadyTimeout bounds the wait for readiness; 0 means DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// MaxStoreBytes caps JetStream file storage; 0 means 1 GiB.
	MaxStoreBytes int64
	// MaxMemoryBytes caps JetStream memory storage; 0 means 64 MiB.
	MaxMemoryBytes int64
	// Security, when set, requires authentication and/or TLS (see
	// security.go); nil accepts any client, as before.
	Security *Security
	// ServerName names the server; empty means "meridian-embedded". The
	// nodes of a JetStream cluster need names of their own.
	ServerName string
	// Cluster, when set, makes this server one node of a NATS cluster with
	// clustered JetStream (one node per process, as production runs NATS).
	// Nil: a standalone server, as before.
	Cluster *Cluster
}

// Cluster is this node's place in a NATS cluster on loopback.
type Cluster struct {
	// Name is the cluster's name, the same on every node; empty means
	// "meridian".
	Name string
	// Port is this node's loopback route port. Required.
	Port int
	// Routes are the other nodes' route URLs, nats://127.0.0.1:port (a
	// node's own URL may be among them; the server skips it).
	Routes []string
	// NoAdvertise keeps the node from telling clients the other nodes'
	// client URLs, so a client reaches the cluster only through the URLs
	// it was given (the soak puts a proxy in front of each node).
	NoAdvertise bool
}

func (c *Cluster) validate(clientPort int) error {
	if c == nil {
		return nil
	}
	if c.Port <= 0 || c.Port > 65535 {
		return fmt.Errorf("embednats: Cluster.Port %d out of range 1..65535", c.Port)
	}
	if c.Port == clientPort {
		return fmt.Errorf("embednats: Cluster.Port and Config.Port are both %d", c.Port)
	}
	for _, r := range c.Routes {
		u, err := url.Parse(r)
		if err != nil || u.Scheme != "nats" || u.Hostname() != "127.0.0.1" || u.Port() == "" {
			return fmt.Errorf("embednats: Cluster.Routes: %q is not nats://127.0.0.1:port (nodes listen on loopback only)", r)
		}
	}
	return nil
}

func (c *Cluster) routeURLs() []*url.URL {
	var out []*url.URL
	for _, r := range c.Routes {
		u, _ := url.Parse(r) // validated
		out = append(out, u)
	}
	return out
}

// Server is a running embedded NATS server.
type Server struct {
	cfg  Config
	log  *slog.Logger
	port int

	mu      sync.Mutex
	ns      *server.Server
	started time.Duration
}

// Start validates cfg, starts the server with JetStream and waits until it
// accepts connections.
func Start(cfg Config) (*Server, error) {
	if strings.TrimSpace(cfg.StoreDir) == "" {
		return nil, errors.New("embednats: Config.StoreDir is required")
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("embednats: Config.Port %d out of range 0..65535", cfg.Port)
	}
	if cfg.MaxStoreBytes < 0 {
		return nil, fmt.Errorf("embednats: Config.MaxStoreBytes %d is negative", cfg.MaxStoreBytes)
	}
	if cfg.MaxMemoryBytes < 0 {
		return nil, fmt.Errorf("embednats: Config.MaxMemoryBytes %d is negative", cfg.MaxMemoryBytes)
	}
	if err := cfg.Security.validate(); err != nil {
		return nil, err
	}
	if err := cfg.Cluster.validate(cfg.Port); err != nil {
		return nil, err
	}
	if cfg.Cluster != nil && cfg.Port == 0 {
		return nil, errors.New("embednats: a cluster node needs a fixed Config.Port")
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	if cfg.MaxStoreBytes == 0 {
		cfg.MaxStoreBytes = 1 << 30
	}
	if cfg.MaxMemoryBytes == 0 {
		cfg.MaxMemoryBytes = 64 << 20
	}
	if err := os.MkdirAll(cfg.StoreDir, 0o700); err != nil {
		return nil, fmt.Errorf("embednats: Config.StoreDir %q: %w", cfg.StoreDir, err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, port: cfg.Port}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := s.start(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) start() error {
	t0 := time.Now()
	port := s.port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	name := s.cfg.ServerName
	if name == "" {
		name = "meridian-embedded"
	}
	opts := &server.Options{
		ServerName:         name,
		Host:               "127.0.0.1",
		Port:               port,
		HTTPPort:           0,
		NoSigs:             true,
		JetStream:          true,
		StoreDir:           s.cfg.StoreDir,
		JetStreamMaxStore:  s.cfg.MaxStoreBytes,
		JetStreamMaxMemory: s.cfg.MaxMemoryBytes,
		MaxPayload:         8 << 20,
	}
	if err := s.cfg.Security.apply(opts); err != nil {
		return err
	}
	if c := s.cfg.Cluster; c != nil {
		opts.Cluster = server.ClusterOpts{Name: c.Name, Host: "127.0.0.1", Port: c.Port, NoAdvertise: c.NoAdvertise}
		if opts.Cluster.Name == "" {
			opts.Cluster.Name = "meridian"
		}
		opts.Routes = c.routeURLs()
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("embednats: configure server: %w", err)
	}
	ns.SetLoggerV2(&slogAdapter{l: s.cfg.Logger}, false, false, false)
	go ns.Start()
	if !ns.ReadyForConnections(s.cfg.ReadyTimeout) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return fmt.Errorf("embednats: server on 127.0.0.1:%d with store %q not ready after %s", s.port, s.cfg.StoreDir, s.cfg.ReadyTimeout)
	}
	if !ns.JetStreamEnabled() {
		ns.Shutdown()
		ns.WaitForShutdown()
		return fmt.Errorf("embednats: JetStream did not start with store %q", s.cfg.StoreDir)
	}
	addr, ok := ns.Addr().(*net.TCPAddr)
	if !ok {
		ns.Shutdown()
		ns.WaitForShutdown()
		return fmt.Errorf("embednats: unexpected listen address %v", ns.Addr())
	}
	s.mu.Lock()
	s.ns = ns
	s.port = addr.Port
	s.started = time.Since(t0)
	s.mu.Unlock()
	s.log.Debug("embedded nats ready", "url", s.ClientURL(), "store_dir", s.cfg.StoreDir, "startup", s.started)
	return nil
}

// ClientURL is the URL clients dial, e.g. "nats://127.0.0.1:4222".
func (s *Server) ClientURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Port is the loopback port the server listens on; it stays the same across
// Restart.
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// StartupTime is how long the last (re)start took until the server was ready.
func (s *Server) StartupTime() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// WaitReady reports whether the server accepts connections within d. It is
// false once the server is closed.
func (s *Server) WaitReady(d time.Duration) bool {
	s.mu.Lock()
	ns := s.ns
	s.mu.Unlock()
	return ns != nil && ns.ReadyForConnections(d)
}

// Restart shuts the server down and starts it again on the same port and
// store dir, as a process restart would. Connected clients see a disconnect
// and reconnect by themselves.
func (s *Server) Restart() error {
	if err := s.Close(); err != nil {
		return err
	}
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = s.start(); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// Close shuts the server down and waits for it. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	ns := s.ns
	s.ns = nil
	s.mu.Unlock()
	if ns == nil {
		return nil
	}
	ns.Shutdown()
	ns.WaitForShutdown()
	return nil
}

// slogAdapter implements server.Logger on top of slog. Notices and debug
// output are dropped; warnings and errors are kept.
type slogAdapter struct{ l *slog.Logger }

func (a *slogAdapter) Noticef(string, ...any) {}
func (a *slogAdapter) Debugf(string, ...any)  {}
func (a *slogAdapter) Tracef(string, ...any)  {}
func (a *slogAdapter) Warnf(format string, v ...any) {
	if a.l != nil {
		a.l.Warn(fmt.Sprintf(format, v...), "component", "nats")
	}
}
func (a *slogAdapter) Errorf(format string, v ...any) {
	if a.l != nil {
		a.l.Error(fmt.Sprintf(format, v...), "component", "nats")
	}
}

// Fatalf is logged as an error; the embedded server never exits the process.
func (a *slogAdapter) Fatalf(format string, v ...any) {
	if a.l != nil {
		a.l.Error(fmt.Sprintf(format, v...), "component", "nats", "fatal", true)
	}
}
