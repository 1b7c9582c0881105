package dashboards

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/meridian-gpu/meridian/connectors/simcluster"
	"github.com/meridian-gpu/meridian/internal/e2e/e2eutil"
	embedetcd "github.com/meridian-gpu/meridian/internal/embedded/etcd"
	"github.com/meridian-gpu/meridian/internal/localrun"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// The checked-in JSON is what Boards generates now.
func TestGeneratedJSONIsCurrent(t *testing.T) {
	boards, err := Boards()
	if err != nil {
		t.Fatal(err)
	}
	if len(boards) != 4 {
		t.Fatalf("%d boards, want the four (fleet, queues, workload flow, hub internals)", len(boards))
	}
	for _, b := range boards {
		want, err := b.JSON()
		if err != nil {
			t.Fatal(err)
		}
		have, err := os.ReadFile(filepath.Join("grafana", b.File))
		if err != nil || !bytes.Equal(have, want) {
			t.Errorf("grafana/%s is stale or missing (%v): run make dashboards", b.File, err)
		}
		again, _ := Boards()
		for _, a := range again {
			if a.File == b.File {
				if j, _ := a.JSON(); !bytes.Equal(j, want) {
					t.Errorf("%s: two builds differ: the generator is not deterministic", b.File)
				}
			}
		}
	}
}

// expressions collects every PromQL expression of the checked-in boards:
// panel targets and the queries of template variables.
func boardExpressions(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("grafana", "*.json"))
	if err != nil || len(files) != 4 {
		t.Fatalf("grafana/*.json: %v %v, want 4 files", files, err)
	}
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_]+\)$`)
	out := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var walk func(v any, key string)
		walk = func(v any, key string) {
			switch x := v.(type) {
			case map[string]any:
				for k, c := range x {
					walk(c, k)
				}
			case []any:
				for _, c := range x {
					walk(c, key)
				}
			case string:
				switch key {
				case "expr":
					out[f] = append(out[f], x)
				case "String": // a query variable's query
					if m := labelValues.FindStringSubmatch(x); m != nil {
						out[f] = append(out[f], m[1])
					}
				}
			}
		}
		walk(doc, "")
		if len(out[f]) == 0 {
			t.Fatalf("%s has no PromQL expressions", f)
		}
	}
	return out
}

// ruleFile is the part of a Prometheus rule file the tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record string `yaml:"record"`
			Alert  string `yaml:"alert"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// rules reads every rule file: the expressions by file and rule, and the
// names the recording rules define.
func rules(t *testing.T) (map[string][]string, map[string]bool) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("prometheus", "*.rules.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("prometheus/*.rules.yaml: %v %v", files, err)
	}
	exprs, recorded := map[string][]string{}, map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rf ruleFile
		if err := yaml.Unmarshal(b, &rf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Expr == "" {
					t.Fatalf("%s: rule %s%s has no expr", f, r.Record, r.Alert)
				}
				if r.Record != "" {
					recorded[r.Record] = true
				}
				exprs[f+": "+r.Record+r.Alert] = append(exprs[f+": "+r.Record+r.Alert], r.Expr)
			}
		}
	}
	return exprs, recorded
}

// scrape reads a hub's /metrics, presenting its admin token.
func scrape(t *testing.T, h *e2eutil.Hub) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, h.REST+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	h.Authorize(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value is one series' value (a histogram's sample count); ok is false
// when the series does not exist.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		case m.GetUntyped() != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

func certFile(t *testing.T, notAfter time.Time) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "east"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "agent.crt")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestQueriesUseExportedMetrics runs a real hub (embedded etcd and NATS)
// and a real agent on a simulated cluster, runs a workload through them,
// gathers every metric the two export, and checks that every metric name
// in every panel, template variable and rule is one of them (or a name a
// recording rule defines, or Prometheus's own up). A renamed metric fails
// here. It also checks the values of the hub's own process metrics.
func TestQueriesUseExportedMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	h, err := e2eutil.StartHub(ctx, "dash-hub", log)
	if err != nil {
		e2eutil.SkipOrFail(t, "ETCD", "a hub on embedded etcd and NATS", err.Error())
	}
	defer h.Stop()

	simCfg, err := simcluster.Example("h100-nvlink")
	if err != nil {
		t.Fatal(err)
	}
	sim, err := simcluster.New(simCfg, simcluster.Options{DefaultDuration: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	am := agent.NewMetrics(nil)
	certExp := time.Now().Add(30 * 24 * time.Hour).Truncate(time.Second)
	am.WatchCredentialFiles("", certFile(t, certExp))
	stopAgent, err := localrun.Agent(ctx, context.Background(), h.Server.NATSURL(), "dash-agent", agent.Config{
		ClusterID: "east", Connector: sim, Logger: log, Version: "test", Metrics: am,
		HeartbeatInterval: 300 * time.Millisecond, AdvertiseInterval: time.Second, ChangeDelay: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stopAgent()
	if err := e2eutil.WaitClusters(ctx, h.CL, 20*time.Second, "east"); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"acme", "acme/vision"} {
		if _, err := h.Q.CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: &meridianv1.Queue{Path: path,
			Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: "nvidia-h100-80gb", NominalMilliGpus: 8000}}}}); err != nil {
			t.Fatalf("create queue %s: %v", path, err)
		}
	}
	wl := e2eutil.Workloads{WL: h.WL}
	id := wl.Submit(t, &meridianv1.Workload{Name: "dash", Queue: "acme/vision", PodSets: []*meridianv1.PodSet{{
		Name: "w", Replicas: 1, Resources: &meridianv1.Resources{GpuMilli: 1000, AcceleratorClass: "nvidia-h100-80gb"}}}})
	wl.WaitPhase(t, id, meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED, 30*time.Second)

	// The hub: its registry as /metrics serves it, once the fleet and the
	// queue gauges are there.
	var hub map[string]*dto.MetricFamily
	deadline := time.Now().Add(15 * time.Second)
	for {
		hub = scrape(t, h)
		_, q := value(hub, "meridian_queue_nominal_gpus", "queue", "acme/vision")
		_, c := value(hub, "meridian_cluster_capacity_gpus", "cluster", "east")
		n, _ := value(hub, "meridian_workload_dispatch_to_running_seconds")
		if q && c && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hub never exported the queue, cluster and latency series (queue %v, cluster %v, dispatch-to-running samples %v)", q, c, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	agentFams, err := am.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]dto.MetricType{}
	for name, f := range hub {
		exported[name] = f.GetType()
	}
	for _, f := range agentFams {
		exported[f.GetName()] = f.GetType()
	}

	// Values the hub's own collectors must show for this run.
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"meridian_hub_nats_connected", nil, 1},
		{"meridian_hub_build_info", []string{"version", "e2e"}, 1},
		{"meridian_scheduler_leader", nil, 1},
		{"meridian_cluster_state", []string{"cluster", "east", "state", "READY"}, 1},
		{"meridian_queue_nominal_gpus", []string{"queue", "acme/vision", "class", "nvidia-h100-80gb"}, 8},
		{"etcd_server_quota_backend_bytes", nil, embedetcd.QuotaBackendBytes},
	} {
		if got, ok := value(hub, c.name, c.labels...); !ok || got != c.want {
			t.Errorf("%s%v = %v (exported %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if got, _ := value(hub, "meridian_hub_nats_messages_total", "direction", "in"); got <= 0 {
		t.Errorf("the hub's NATS connection received %v messages, want some", got)
	}
	if got, ok := value(hub, "etcd_mvcc_db_total_size_in_bytes"); !ok || got <= 0 {
		t.Errorf("etcd_mvcc_db_total_size_in_bytes = %v (exported %v), want the embedded member's size", got, ok)
	}
	if got, ok := value(hub, "meridian_workload_submit_to_dispatch_seconds", "pending_reason", "WaitingForScheduler"); !ok || got != 1 {
		t.Errorf("submit-to-dispatch samples of workloads that never waited = %v, want 1", got)
	}
	fams := map[string]*dto.MetricFamily{}
	for _, f := range agentFams {
		fams[f.GetName()] = f
	}
	if got, ok := value(fams, "meridian_agent_credential_expiry_timestamp_seconds", "credential", "nats_client_cert"); !ok || got != float64(certExp.Unix()) {
		t.Errorf("agent credential expiry = %v (exported %v), want %d", got, ok, certExp.Unix())
	}
	if got, _ := value(fams, "meridian_agent_launches_total", "result", "accepted"); got != 1 {
		t.Errorf("agent launches accepted = %v, want 1", got)
	}

	// Every metric of Meridian's own that the two export is documented.
	doc, err := os.ReadFile(filepath.Join("..", "docs", "observability.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name := range exported {
		if strings.HasPrefix(name, "meridian_") && !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/observability.md does not list %s", name)
		}
	}

	// Every name in every query is real.
	exprs := boardExpressions(t)
	ruleExprs, recorded := rules(t)
	for k, v := range ruleExprs {
		exprs[k] = v
	}
	checked := 0
	var bad []string
	for where, list := range exprs {
		for _, e := range list {
			names, err := MetricNames(e)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if len(names) == 0 {
				bad = append(bad, fmt.Sprintf("%s: %q names no metric", where, e))
			}
			for _, n := range names {
				checked++
				if n == "up" || recorded[n] {
					continue
				}
				if strings.Contains(n, ":") {
					bad = append(bad, fmt.Sprintf("%s: %s looks like a recorded series but no recording rule defines it", where, n))
					continue
				}
				if _, ok := exported[n]; ok {
					continue
				}
				if base, ok := BaseName(n); ok {
					if typ, ok := exported[base]; ok && (typ == dto.MetricType_HISTOGRAM || typ == dto.MetricType_SUMMARY) {
						continue
					}
				}
				bad = append(bad, fmt.Sprintf("%s: %s is not exported by the hub or the agent", where, n))
			}
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Fatalf("%d unknown metric names:\n  %s", len(bad), strings.Join(bad, "\n  "))
	}
	if checked < 60 {
		t.Fatalf("only %d metric names checked; the extraction is broken", checked)
	}
}
