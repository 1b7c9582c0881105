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

func TestRetentionFlagErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"negative ttl", []string{"--retention-ttl", "-1h"}, nil, "--retention-ttl must be 0"},
		{"ttl under a day", []string{"--retention-ttl", "12h"}, nil, "--retention-ttl must be 0 (keep finished workloads forever) or at least 24h"},
		{"ttl without a unit", []string{"--retention-ttl", "7"}, nil, "retention-ttl"},
		{"negative cap", []string{"--retention-max-finished-per-queue", "-5"}, nil, "--retention-max-finished-per-queue must be 0"},
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
