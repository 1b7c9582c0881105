package proxy

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards connections from its loopback address to a target.
type Proxy struct {
	ln     net.Listener
	target string

	latency atomic.Int64 // nanoseconds
	cut     atomic.Bool

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// New listens on a free loopback port and forwards to target
// (host:port).
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk by d in each direction (0: none).
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Cut closes every connection and refuses new ones (true), or lets them
// through again (false).
func (p *Proxy) Cut(on bool) {
	p.cut.Store(on)
	if on {
		p.mu.Lock()
		for c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.cut.Load() {
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.serve(c) }()
	}
}

func (p *Proxy) serve(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client) || !p.track(server) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	defer p.untrack(client)
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	go func() { p.pipe(server, client); done <- struct{}{} }()
	go func() { p.pipe(client, server); done <- struct{}{} }()
	<-done // one side ended: close both
}

type chunk struct {
	due time.Time
	b   []byte
}

// pipe copies src to dst, each chunk held until its latency has passed.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{due: time.Now().Add(time.Duration(p.latency.Load())), b: buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		if d := time.Until(c.due); d > 0 {
			time.Sleep(d)
		}
		if _, err := dst.Write(c.b); err != nil {
			_ = src.Close()
			for range q { // let the reader end
			}
			return
		}
	}
}

var _ io.Closer = (*Proxy)(nil)
