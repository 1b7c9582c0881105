package slurm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestConfigFromEnv(t *testing.T) {
	env := map[string]string{EnvRESTURL: "http://127.0.0.1:6820", EnvUser: "alice", EnvToken: "tok", EnvPartition: "gpu", EnvSlurmConf: "/etc/slurm/slurm.conf", EnvPoll: "500ms"}
	cfg, err := ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RESTURL != env[EnvRESTURL] || cfg.User != "alice" || cfg.Token != "tok" || cfg.JWTKeyFile != "" || cfg.Partition != "gpu" || cfg.PollInterval != 500*time.Millisecond {
		t.Fatalf("config %+v", cfg)
	}
	env[EnvJWTKey] = "/k"
	cfg, _ = ConfigFromEnv(func(k string) string { return env[k] })
	if cfg.JWTKeyFile != "/k" || cfg.Token != "" {
		t.Fatalf("the key file must win over a fixed token: %+v", cfg)
	}
	env[EnvPoll] = "soon"
	if _, err := ConfigFromEnv(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), EnvPoll) {
		t.Fatalf("bad poll interval: %v", err)
	}
}

func TestLoadEnvFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "env")
	os.WriteFile(p, []byte("# comment\nexport A=1\nB='two'\n\n"), 0o600)
	vars, err := LoadEnvFile(p)
	if err != nil || vars["A"] != "1" || vars["B"] != "two" || len(vars) != 2 {
		t.Fatalf("LoadEnvFile = %v, %v", vars, err)
	}
	os.WriteFile(p, []byte("export A=1\nnonsense\n"), 0o600)
	if _, err := LoadEnvFile(p); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad line: %v", err)
	}
}

func TestNewConfigErrors(t *testing.T) {
	no := false
	tests := map[string]struct {
		cfg  Config
		want string
	}{
		"bad version":    {Config{APIVersion: "v0.0.40", RESTURL: "http://x"}, "api version"},
		"bad url":        {Config{RESTURL: "127.0.0.1:6820", Token: "t", CLI: &no}, "rest_url"},
		"no credentials": {Config{RESTURL: "http://127.0.0.1:6820", CLI: &no}, "token"},
		"missing key":    {Config{RESTURL: "http://127.0.0.1:6820", JWTKeyFile: filepath.Join(t.TempDir(), "none"), CLI: &no}, "jwt_key_file"},
		"nothing":        {Config{CLI: &no}, "nothing to talk to"},
		"bad cluster id": {Config{RESTURL: "http://x", Token: "t", ClusterID: "a b", CLI: &no}, "cluster_id"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := New(tc.cfg)
			if err == nil {
				c.Close()
				t.Fatal("New accepted it")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name %q", err, tc.want)
			}
		})
	}
}

func TestCollector(t *testing.T) {
	no := false
	c, err := New(Config{RESTURL: "http://127.0.0.1:1", Token: "t", CLI: &no, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.stats.Submits.Add(3)
	c.stats.Rejects.Add(1)
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf.GetMetric()[0].GetCounter().GetValue()
	}
	if len(got) != 5 || got["meridian_slurm_jobs_submitted_total"] != 3 || got["meridian_slurm_dispatches_rejected_total"] != 1 || got["meridian_slurm_poll_errors_total"] != 0 {
		t.Fatalf("metrics %v", got)
	}
}
