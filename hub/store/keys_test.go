package store

import (
	"strings"
	"testing"
)

func TestKey(t *testing.T) {
	tests := map[string]struct {
		kind    Kind
		id      string
		want    string
		wantErr string
	}{
		"workload":         {KindWorkloads, "wl-123", "/meridian/workloads/wl-123", ""},
		"queue path":       {KindQueues, "acme/ml/llm", "/meridian/queues/acme/ml/llm", ""},
		"ledger":           {KindLedger, "acme:nvidia-h100-80gb", "/meridian/ledger/acme:nvidia-h100-80gb", ""},
		"unknown kind":     {Kind("pods"), "x", "", "kind"},
		"empty id":         {KindClusters, "", "", "empty"},
		"leading slash":    {KindQueues, "/a", "", "empty path segment"},
		"trailing slash":   {KindQueues, "a/", "", "empty path segment"},
		"double slash":     {KindQueues, "a//b", "", "empty path segment"},
		"dot dot segment":  {KindQueues, "a/../b", "", `".."`},
		"space":            {KindDispatches, "a b", "", "invalid character"},
		"wildcard":         {KindDispatches, "a*", "", "invalid character"},
		"non ascii":        {KindDispatches, "café", "", "invalid character"},
		"too long":         {KindIdempotency, strings.Repeat("k", MaxIDLen+1), "", "bytes"},
		"longest accepted": {KindIdempotency, strings.Repeat("k", MaxIDLen), "/meridian/idempotency/" + strings.Repeat("k", MaxIDLen), ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Key(tc.kind, tc.id)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Key(%q, %q) error = %v, want one containing %q", tc.kind, tc.id, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Key(%q, %q) = %q, %v; want %q", tc.kind, tc.id, got, err, tc.want)
			}
			k, id, err := ParseKey(got)
			if err != nil || k != tc.kind || id != tc.id {
				t.Fatalf("ParseKey(%q) = %q, %q, %v; want %q, %q", got, k, id, err, tc.kind, tc.id)
			}
			if !strings.HasPrefix(got, Prefix(tc.kind)) {
				t.Fatalf("key %q not under Prefix(%q) = %q", got, tc.kind, Prefix(tc.kind))
			}
		})
	}
}

func TestParseKeyRejects(t *testing.T) {
	for name, key := range map[string]string{
		"other root":   "/other/workloads/x",
		"unknown kind": "/meridian/pods/x",
		"no id":        "/meridian/workloads",
		"empty id":     "/meridian/workloads/",
		"bad id":       "/meridian/workloads/a b",
	} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := ParseKey(key); err == nil {
				t.Fatalf("ParseKey(%q) accepted a bad key", key)
			}
		})
	}
}

func TestKindsHavePrefixes(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Kinds() {
		p := Prefix(k)
		if p == "" || seen[p] {
			t.Fatalf("kind %q has empty or duplicate prefix %q", k, p)
		}
		seen[p] = true
	}
	if len(seen) != 7 {
		t.Fatalf("got %d kinds, want 7", len(seen))
	}
	// A watcher tells kinds apart by prefix: none may hold another's.
	for a := range seen {
		for b := range seen {
			if a != b && strings.HasPrefix(b, a) {
				t.Fatalf("prefix %q holds %q", a, b)
			}
		}
	}
	if Prefix("nope") != "" {
		t.Fatal("Prefix of an unknown kind must be empty")
	}
}
