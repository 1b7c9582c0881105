package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meridian-gpu/meridian/connectors/simcluster"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// TestWorkloadRunsOnSimclusterAgent is the whole path through the assembled
// hub: a REST submit, the scheduling loop, JetStream, a real agent driving
// a simulated cluster, events back, SUCCEEDED, and the queue's usage
// released. It also checks that the loop is wired as the API's cluster
// source and explainer.
func TestWorkloadRunsOnSimclusterAgent(t *testing.T) {
	s, _ := startHub(t, t.TempDir())
	base := "http://" + s.Addrs().HTTP
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()

	stopAgent := startEastAgent(t, ctx, s.NATSURL(), 300*time.Millisecond)
	defer stopAgent()
	createAcmeQueues(t, base)
	// The agent's advertisement reaches the API through the loop's fleet.
	waitFor(t, 15*time.Second, "cluster east listed", func() bool {
		code, body := get(t, base+"/v1/clusters/east")
		return code == 200 && strings.Contains(body, "CLUSTER_STATE_READY")
	})
	// Drain and resume through REST reach the loop.
	if code, body := post(t, base+"/v1/clusters/east:drain", `{"reason":"maintenance"}`); code != 200 || !strings.Contains(body, "CLUSTER_STATE_DRAINING") {
		t.Fatalf("drain: %d %s", code, body)
	}
	if code, body := post(t, base+"/v1/clusters/east:resume", `{}`); code != 200 || !strings.Contains(body, "CLUSTER_STATE_READY") {
		t.Fatalf("resume: %d %s", code, body)
	}
	if code, body := get(t, base+"/v1/clusters/nowhere"); code != 404 {
		t.Fatalf("unknown cluster: %d %s", code, body)
	}
	code, body := post(t, base+"/v1/workloads", `{"queue":"acme/vision","labels":{"meridian.io/sim-duration":"300ms"},
		"podSets":[{"name":"w","replicas":2,"resources":{"gpuMilli":1000,"acceleratorClass":"nvidia-h100-80gb"}}]}`)
	if code != 200 {
		t.Fatalf("submit: %d %s", code, body)
	}
	var sub meridianv1.SubmitWorkloadResponse
	if err := protojson.Unmarshal([]byte(body), &sub); err != nil {
		t.Fatal(err)
	}
	id := sub.GetWorkload().GetId()
	var w meridianv1.Workload
	waitFor(t, 20*time.Second, "workload "+id+" SUCCEEDED", func() bool {
		code, body := get(t, base+"/v1/workloads/"+id)
		if code != 200 {
			return false
		}
		w.Reset()
		return protojson.Unmarshal([]byte(body), &w) == nil && w.GetStatus().GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED
	})
	if w.GetStatus().GetCluster() != "east" || w.GetStatus().GetDispatchId() == "" {
		t.Fatalf("finished workload status %v", w.GetStatus())
	}
	// Quota released: the queue's usage goes back to zero.
	waitFor(t, 10*time.Second, "acme/vision usage released", func() bool {
		code, body := get(t, base+"/v1/queues/acme/vision")
		var q meridianv1.Queue
		if code != 200 || protojson.Unmarshal([]byte(body), &q) != nil || q.GetStatus() == nil {
			return false
		}
		for _, c := range q.GetStatus().GetClasses() {
			if c.GetUsageMilli() != 0 {
				return false
			}
		}
		return q.GetStatus().GetRunningWorkloads() == 0
	})
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startEastAgent runs a real agent for cluster east on a simulated
// h100-nvlink cluster (work lasts dur unless a workload says otherwise),
// over a bus dialled with opts; the returned func stops both.
func startEastAgent(t *testing.T, ctx context.Context, natsURL string, dur time.Duration, opts ...natsbus.Option) (stop func()) {
	t.Helper()
	cfg, err := simcluster.Example("h100-nvlink")
	if err != nil {
		t.Fatal(err)
	}
	sim, err := simcluster.New(cfg, simcluster.Options{DefaultDuration: dur})
	if err != nil {
		t.Fatal(err)
	}
	bus, err := natsbus.Connect(ctx, natsURL, opts...)
	if err != nil {
		sim.Close()
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{ClusterID: "east", Bus: bus, Connector: sim, HeartbeatInterval: 200 * time.Millisecond, AdvertiseInterval: 500 * time.Millisecond})
	if err != nil {
		bus.Close()
		sim.Close()
		t.Fatal(err)
	}
	actx, acancel := context.WithCancel(ctx)
	agentDone := make(chan struct{})
	go func() { defer close(agentDone); _ = a.Run(actx) }()
	return func() {
		acancel()
		<-agentDone
		bus.Close()
		sim.Close()
	}
}

// createAcmeQueues creates acme and acme/vision over REST, 16 H100s each.
func createAcmeQueues(t *testing.T, base string) {
	t.Helper()
	for _, q := range []string{"acme", "acme/vision"} {
		if code, body := post(t, base+"/v1/queues", `{"path":"`+q+`","quotas":[{"acceleratorClass":"nvidia-h100-80gb","nominalMilliGpus":16000}]}`); code != 200 {
			t.Fatalf("create queue %s: %d %s", q, code, body)
		}
	}
}
