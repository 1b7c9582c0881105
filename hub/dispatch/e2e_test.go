package dispatch

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-gpu/meridian/connectors/simcluster"
	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	spoke "github.com/meridian-gpu/meridian/spoke-agent"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// TestEndToEndWithSimclusterAgent runs the real spoke agent over a simulated
// H100 cluster against the loop: gangs with NVLink topology and single-GPU
// work all run once and succeed.
func TestEndToEndWithSimclusterAgent(t *testing.T) {
	e := newEnv(t, fastConfig())
	q := &meridianv1.Queue{Path: "acme/ml/train", Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: "nvidia-h100-80gb", NominalMilliGpus: 64000}}}
	qb, _ := proto.Marshal(q)
	qk, _ := store.Key(store.KindQueues, q.Path)
	if _, err := e.st.Commit(e.ctx, nil, store.Put(qk, qb)); err != nil {
		t.Fatal(err)
	}
	cfg, err := simcluster.Example("h100-nvlink")
	if err != nil {
		t.Fatal(err)
	}
	sim, err := simcluster.New(cfg, simcluster.Options{DefaultDuration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	bus, err := natsbus.Connect(e.ctx, e.url, natsbus.WithName("agent-iad"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Close)
	if err := bus.EnsureStreams(e.ctx); err != nil {
		t.Fatal(err)
	}
	ag, err := spoke.New(spoke.Config{ClusterID: "iad", Bus: bus, Connector: sim, HeartbeatInterval: 200 * time.Millisecond,
		AdvertiseInterval: time.Second, ChangeDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	actx, stop := context.WithCancel(e.ctx)
	agentDone := make(chan struct{})
	go func() { defer close(agentDone); _ = ag.Run(actx) }()
	t.Cleanup(func() { stop(); <-agentDone })

	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	e.waitKnown(h, "iad")

	var ws []*meridianv1.Workload
	for i := 0; i < 4; i++ {
		ws = append(ws, &meridianv1.Workload{Id: fmt.Sprintf("gang%d", i), Queue: "acme/ml/train", PodSets: []*meridianv1.PodSet{{
			Name: "workers", Replicas: 4, Topology: meridianv1.Topology_TOPOLOGY_NVLINK_DOMAIN,
			Resources: &meridianv1.Resources{GpuMilli: 8000, AcceleratorClass: "nvidia-h100-80gb"},
		}}})
	}
	for i := 0; i < 24; i++ {
		w := gpuWorkload(fmt.Sprintf("one%02d", i), "acme/ml/train", 1)
		w.PodSets[0].Resources.AcceleratorClass = "nvidia-h100-80gb"
		ws = append(ws, w)
	}
	e.submit(ws...)
	e.waitFor("every workload to succeed on the simulated cluster", 40*time.Second, func() bool {
		return e.countPhase(meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED) == len(ws)
	})
	if got := sim.Launches(); got != len(ws) {
		t.Fatalf("simcluster launched %d times for %d workloads", got, len(ws))
	}
	for id, w := range e.workloads() {
		if w.GetStatus().GetAttempts() != 1 || w.GetStatus().GetCluster() != "iad" {
			t.Fatalf("%s = %v", id, w.GetStatus())
		}
	}
	if n := e.dispatchRecords(); n != 0 {
		t.Fatalf("%d dispatch records left", n)
	}
}
