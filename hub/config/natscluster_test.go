package config

import (
	"strings"
	"testing"

	cc "github.com/meridian-gpu/meridian/internal/componentconfig"
)

// TestNATSClusterSettings: a NATS cluster's URLs come comma-separated,
// each checked on its own, and nats.streamReplicas is 1..5, above 1 only
// with an external NATS.
func TestNATSClusterSettings(t *testing.T) {
	ext := "etcd: {endpoints: [\"http://127.0.0.1:2379\"]}\n"
	for name, tc := range map[string]struct {
		body string
		want []string // empty: valid
	}{
		"cluster URLs, R3": {ext + "nats: {url: \"nats://127.0.0.1:4222,nats://127.0.0.1:4223, nats://127.0.0.1:4224\", streamReplicas: 3}\n", nil},
		"default replicas": {"nats: {}\n", nil},
		"one bad URL":      {ext + "nats: {url: \"nats://127.0.0.1:4222,127.0.0.1\"}\n", []string{"nats.url: want a URL such as nats://10.0.0.6:4222, or several comma-separated"}},
		"glued URLs":       {ext + "nats: {url: \"nats://127.0.0.1:4222,nats:\"}\n", []string{"nats.url: want a URL"}},
		"zero replicas":    {ext + "nats: {url: \"nats://127.0.0.1:4222\", streamReplicas: 0}\n", []string{"nats.streamReplicas: want 1..5 (got 0)"}},
		"six replicas":     {ext + "nats: {url: \"nats://127.0.0.1:4222\", streamReplicas: 6}\n", []string{"nats.streamReplicas: want 1..5 (got 6)"}},
		"R3 embedded":      {"nats: {streamReplicas: 3}\n", []string{"nats.streamReplicas: the embedded NATS is a single server"}},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := NewSchema(Options{}).Parse("hub.yaml", hubFile(tc.body))
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("valid configuration refused: %v", err)
				}
				if !strings.Contains(tc.body, "streamReplicas") && c.NATS.StreamReplicas != DefaultStreamReplicas {
					t.Fatalf("streamReplicas %d, want the default %d", c.NATS.StreamReplicas, DefaultStreamReplicas)
				}
				return
			}
			l, ok := cc.AsErrorList(err)
			if !ok {
				t.Fatalf("err %v, want an ErrorList", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("errors lack %q:\n%v", w, err)
				}
			}
			if len(l) != len(tc.want) {
				t.Errorf("%d errors, want %d:\n%v", len(l), len(tc.want), err)
			}
		})
	}
}
