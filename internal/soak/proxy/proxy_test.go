package proxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echo runs a line echo server on loopback.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(l)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, msg string) (time.Duration, error) {
	t.Helper()
	t0 := time.Now()
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return 0, err
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	l, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if l != msg+"\n" {
		t.Fatalf("echo %q, want %q", l, msg)
	}
	return time.Since(t0), nil
}

// The proxy forwards both ways, adds its latency each way, cuts every
// connection and refuses new ones while cut, and lets them through again.
func TestProxyForwardsDelaysAndCuts(t *testing.T) {
	p, err := New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := roundTrip(t, c, r, "hello"); err != nil {
		t.Fatal(err)
	}
	p.SetLatency(100 * time.Millisecond)
	d, err := roundTrip(t, c, r, "slow")
	if err != nil {
		t.Fatal(err)
	}
	if d < 200*time.Millisecond {
		t.Fatalf("round trip %s with 100 ms each way, want at least 200 ms", d)
	}
	p.SetLatency(0)
	p.Cut(true)
	if _, err := roundTrip(t, c, r, "cut"); err == nil {
		t.Fatal("a connection survived the cut")
	}
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		_ = c2.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c2.Read(make([]byte, 1)); err == nil {
			t.Fatal("a new connection was served while cut")
		}
		c2.Close()
	}
	p.Cut(false)
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if _, err := roundTrip(t, c3, bufio.NewReader(c3), "back"); err != nil {
		t.Fatalf("after the cut: %v", err)
	}
}
