package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/hub/retention"
)

func TestRetentionFlags(t *testing.T) {
	t.Setenv("MERIDIAN_RETENTION_TTL", "")
	t.Setenv("MERIDIAN_RETENTION_MAX_FINISHED_PER_QUEUE", "")
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.RetentionTTL != retention.DefaultTTL || o.cfg.RetentionPerQueue != retention.DefaultMaxPerQueue {
		t.Fatalf("defaults: ttl %s, per queue %d; want %s, %d", o.cfg.RetentionTTL, o.cfg.RetentionPerQueue, retention.DefaultTTL, retention.DefaultMaxPerQueue)
	}
	// 0 turns each limit off.
	o, err = parseFlags([]string{"--retention-ttl", "0", "--retention-max-finished-per-queue", "0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.RetentionTTL != 0 || o.cfg.RetentionPerQueue != 0 {
		t.Fatalf("0 did not disable: %s, %d", o.cfg.RetentionTTL, o.cfg.RetentionPerQueue)
	}
	// The environment sets them; a flag wins over it.
	t.Setenv("MERIDIAN_RETENTION_TTL", "72h")
	t.Setenv("MERIDIAN_RETENTION_MAX_FINISHED_PER_QUEUE", "500")
	o, err = parseFlags([]string{"--retention-max-finished-per-queue", "20"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.RetentionTTL != 72*time.Hour || o.cfg.RetentionPerQueue != 20 {
		t.Fatalf("env and flag: %s, %d; want 72h, 20", o.cfg.RetentionTTL, o.cfg.RetentionPerQueue)
	}
}

func TestIdempotencyWindowFlag(t *testing.T) {
	t.Setenv("MERIDIAN_RETENTION_TTL", "")
	t.Setenv("MERIDIAN_IDEMPOTENCY_WINDOW", "")
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.IdempotencyWindow != retention.IdempotencyWindow {
		t.Fatalf("default window %s, want %s", o.cfg.IdempotencyWindow, retention.IdempotencyWindow)
	}
	// A shorter window lets a shorter TTL through.
	o, err = parseFlags([]string{"--idempotency-window", "1h", "--retention-ttl", "2h"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.IdempotencyWindow != time.Hour || o.cfg.RetentionTTL != 2*time.Hour {
		t.Fatalf("window %s, ttl %s; want 1h, 2h", o.cfg.IdempotencyWindow, o.cfg.RetentionTTL)
	}
	t.Setenv("MERIDIAN_IDEMPOTENCY_WINDOW", "15m")
	if o, err = parseFlags(nil, io.Discard); err != nil || o.cfg.IdempotencyWindow != 15*time.Minute {
		t.Fatalf("env window: %s, %v; want 15m", o.cfg.IdempotencyWindow, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--idempotency-window", "30s"}, "retention.idempotencyWindow (--idempotency-window): must be at least 1m (got 30s)"},
		{[]string{"--idempotency-window", "1h", "--retention-ttl", "30m"}, "retention.ttl (--retention-ttl): must be 0 (keep finished workloads forever) or at least 1h, the retention.idempotencyWindow (got 30m)"},
	} {
		if _, err := parseFlags(c.args, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%v: error %v, want it to mention %q", c.args, err, c.want)
		}
	}
}

func TestRetentionFlagErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"negative ttl", []string{"--retention-ttl", "-1h"}, nil, "retention.ttl (--retention-ttl): must be 0"},
		{"ttl under a day", []string{"--retention-ttl", "12h"}, nil, "retention.ttl (--retention-ttl): must be 0 (keep finished workloads forever) or at least 24h"},
		{"ttl without a unit", []string{"--retention-ttl", "7"}, nil, "retention-ttl"},
		{"negative cap", []string{"--retention-max-finished-per-queue", "-5"}, nil, "retention.maxFinishedPerQueue (--retention-max-finished-per-queue): must be 0"},
		{"cap not a number", []string{"--retention-max-finished-per-queue", "lots"}, nil, "retention-max-finished-per-queue"},
		{"bad env ttl", nil, map[string]string{"MERIDIAN_RETENTION_TTL": "a week"}, `MERIDIAN_RETENTION_TTL="a week"`},
		{"bad env cap", nil, map[string]string{"MERIDIAN_RETENTION_MAX_FINISHED_PER_QUEUE": "x"}, "MERIDIAN_RETENTION_MAX_FINISHED_PER_QUEUE"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var stderr bytes.Buffer
			_, err := parseFlags(c.args, &stderr)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error()+stderr.String(), c.want) {
				t.Fatalf("error %q (stderr %q) does not mention %q", err, stderr.String(), c.want)
			}
		})
	}
}
