package slurm

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Environment variables ConfigFromEnv reads; scripts/slurm-up.sh writes
// them to "$MERIDIAN_SLURM_DIR/env".
const (
	EnvRESTURL   = "MERIDIAN_SLURM_REST_URL"
	EnvUser      = "MERIDIAN_SLURM_USER"
	EnvToken     = "MERIDIAN_SLURM_TOKEN"
	EnvJWTKey    = "MERIDIAN_SLURM_JWT_KEY"
	EnvPartition = "MERIDIAN_SLURM_PARTITION"
	EnvSlurmConf = "SLURM_CONF"
	EnvPoll      = "MERIDIAN_SLURM_POLL_INTERVAL"
)

// ConfigFromEnv builds a Config from the MERIDIAN_SLURM_* variables (see
// the Env constants) read through getenv (os.Getenv in production). A
// minted token (MERIDIAN_SLURM_JWT_KEY) is preferred over a fixed one,
// which expires.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	cfg := Config{
		RESTURL:   getenv(EnvRESTURL),
		User:      getenv(EnvUser),
		Partition: getenv(EnvPartition),
		SlurmConf: getenv(EnvSlurmConf),
	}
	if k := getenv(EnvJWTKey); k != "" {
		cfg.JWTKeyFile = k
	} else {
		cfg.Token = getenv(EnvToken)
	}
	if v := getenv(EnvPoll); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return cfg, fmt.Errorf("%s: %q is not a positive duration", EnvPoll, v)
		}
		cfg.PollInterval = d
	}
	return cfg, nil
}

// LoadEnvFile reads the "export KEY=VALUE" lines of an env file such as the
// one scripts/slurm-up.sh writes, for use with ConfigFromEnv.
func LoadEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("slurm env file: %w", err)
	}
	defer f.Close()
	vars := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("slurm env file %s line %d: want KEY=VALUE", path, n)
		}
		vars[k] = strings.Trim(v, `"'`)
	}
	return vars, sc.Err()
}

var (
	descSubmits   = prometheus.NewDesc("meridian_slurm_jobs_submitted_total", "Slurm jobs submitted for dispatches.", nil, nil)
	descRejects   = prometheus.NewDesc("meridian_slurm_dispatches_rejected_total", "Dispatches refused with a reason (by the connector's rules or by Slurm).", nil, nil)
	descSubmitErr = prometheus.NewDesc("meridian_slurm_submit_errors_total", "Submits that failed with a retryable fault (auth, slurmctld down, network).", nil, nil)
	descPollErr   = prometheus.NewDesc("meridian_slurm_poll_errors_total", "Job state polls that failed.", nil, nil)
	descFallbacks = prometheus.NewDesc("meridian_slurm_cli_fallbacks_total", "Reads or cancels served by the Slurm commands after slurmrestd failed.", nil, nil)
)

type collector struct{ c *Connector }

// Collector exposes the connector's counters to Prometheus; register it on
// the agent's registry.
func (c *Connector) Collector() prometheus.Collector { return collector{c} }

func (k collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSubmits, descRejects, descSubmitErr, descPollErr, descFallbacks} {
		ch <- d
	}
}

func (k collector) Collect(ch chan<- prometheus.Metric) {
	s := &k.c.stats
	for d, v := range map[*prometheus.Desc]int64{
		descSubmits: s.Submits.Load(), descRejects: s.Rejects.Load(), descSubmitErr: s.SubmitErrors.Load(),
		descPollErr: s.PollErrors.Load(), descFallbacks: s.Fallbacks.Load(),
	} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
}
