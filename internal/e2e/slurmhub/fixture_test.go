package slurmhub

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meridian-gpu/meridian/connectors/simcluster"
	"github.com/meridian-gpu/meridian/connectors/slurm"
	"github.com/meridian-gpu/meridian/hub/server"
	"github.com/meridian-gpu/meridian/internal/e2e/e2eutil"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// The fixture is one hub (embedded etcd and NATS, the scheduling loop, gRPC
// and REST) with two spokes: the local Slurm cluster behind a real agent
// and the Slurm connector, and a simulated 64 x H100 cluster. All tests of
// the package share it; TestMain stops it.

const (
	h100      = "nvidia-h100-80gb"
	testQueue = "e2e/slurm"
	simID     = "sim-east"
	// slurmSel selects the Slurm spoke (its label; the simulated one
	// lacks it).
	slurmSelKey, slurmSelVal = "scheduler", "slurm"
)

type fixture struct {
	local             *Local
	hub               *server.Server
	h                 *e2eutil.Hub
	hubStop           func()
	rest              string // http://host:port
	grpcAdr           string
	conn              *grpc.ClientConn
	wl                meridianv1.WorkloadServiceClient
	cl                meridianv1.ClusterServiceClient
	slurmID           string
	log               *slog.Logger
	logBuf            *e2eutil.LogBuffer
	e2eutil.Workloads // Submit, Get, WaitPhase, Failf

	mu        sync.Mutex
	slurmConn *slurm.Connector
	stopSlurm func()
	stopSim   func()
}

var (
	fixLock *os.File
	shared  = &e2eutil.Shared[fixture]{Part: "SLURM", What: "end-to-end Slurm test", Component: "Slurm daemons and a hub", NotRoot: ErrNotRoot, Start: start}
)

// TestMain stops the shared fixture; with MERIDIAN_E2E_LOG=<file> it also
// writes the hub's and agents' logs there.
func TestMain(m *testing.M) {
	code := m.Run()
	if fix := shared.Started(); fix != nil {
		fix.close()
		fix.logBuf.WriteOnExit()
	}
	os.Exit(code)
}

func skipOrFail(t testing.TB, msg string) {
	t.Helper()
	e2eutil.SkipOrFail(t, shared.Part, shared.What, msg)
}

// need returns the shared fixture, starting it on first use (see
// e2eutil.Shared for when it skips or fails).
func need(t testing.TB) *fixture {
	t.Helper()
	return shared.Need(t)
}

func start() (*fixture, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	// Held until the test binary exits: connectors/slurm's tests use the
	// same cluster and may run at the same time under go test ./...
	lock, err := Lock(ctx, 10*time.Minute)
	if err != nil {
		return nil, err
	}
	fixLock = lock // referenced, so the collector never closes it
	local, err := Up(ctx)
	if err != nil {
		return nil, err
	}
	f := &fixture{local: local, slurmID: fmt.Sprintf("slurm-e2e-%d", os.Getpid()), logBuf: &e2eutil.LogBuffer{}}
	f.Workloads.Log = f.logBuf
	f.log = slog.New(slog.NewTextHandler(f.logBuf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	h, err := e2eutil.StartHub(ctx, "hub-slurm-e2e", f.log)
	if err != nil {
		return f, err // Slurm is up: a hub that does not start is our fault
	}
	f.h, f.hub, f.hubStop, f.grpcAdr, f.rest = h, h.Server, h.Stop, h.GRPC, h.REST
	f.conn, f.wl, f.cl = h.Conn, h.WL, h.CL
	f.Workloads.WL = f.wl
	qc := h.Q
	// From here on a failure is the fixture's fault, not a missing Slurm:
	// return f with the error so the test fails.
	fail := func(err error) (*fixture, error) { return f, err }
	for _, p := range []string{"e2e", testQueue} {
		q := &meridianv1.Queue{Path: p, Weight: 1, Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: h100, NominalMilliGpus: 512000}}}
		if _, err := qc.CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: q}); err != nil {
			return fail(fmt.Errorf("create queue %s: %w", p, err))
		}
	}
	if err := f.startSlurmAgent(ctx, false); err != nil {
		return fail(err)
	}
	cfg, err := simcluster.Example("h100-nvlink")
	if err != nil {
		return fail(err)
	}
	sim, err := simcluster.New(cfg, simcluster.Options{DefaultDuration: time.Second, Logger: f.log.With("cluster", simID)})
	if err != nil {
		return fail(err)
	}
	stop, err := f.startAgent(ctx, simID, sim, false)
	if err != nil {
		sim.Close()
		return fail(err)
	}
	f.stopSim = func() { stop(); sim.Close() }
	if err := f.waitClusters(ctx, 30*time.Second, f.slurmID, simID); err != nil {
		return fail(err)
	}
	return f, nil
}

// startSlurmAgent starts a fresh Slurm connector and agent (a restarted
// agent has no memory of earlier dispatches). The tests poll and advertise
// fast; with defaults the connector and the agent run with their
// production defaults (the benchmark).
func (f *fixture) startSlurmAgent(ctx context.Context, defaults bool) error {
	cfg := f.local.Config(f.slurmID)
	cfg.Labels = map[string]string{slurmSelKey: slurmSelVal}
	cfg.Logger = f.log.With("connector", "slurm")
	if !defaults {
		cfg.PollInterval = 200 * time.Millisecond
	}
	c, err := slurm.New(cfg)
	if err != nil {
		return fmt.Errorf("slurm connector: %w", err)
	}
	stop, err := f.startAgent(ctx, f.slurmID, c, defaults)
	if err != nil {
		c.Close()
		return err
	}
	f.mu.Lock()
	f.slurmConn = c
	f.stopSlurm = func() { stop(); c.Close() }
	f.mu.Unlock()
	return nil
}

func (f *fixture) restartSlurmAgent(t testing.TB, defaults bool) *slurm.Connector {
	t.Helper()
	f.mu.Lock()
	stop := f.stopSlurm
	f.mu.Unlock()
	stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.startSlurmAgent(ctx, defaults); err != nil {
		t.Fatalf("restart the Slurm agent: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.slurmConn
}

func (f *fixture) startAgent(ctx context.Context, id string, conn agent.Connector, defaults bool) (func(), error) {
	return f.h.StartAgent(ctx, id, conn, f.log, !defaults)
}

func (f *fixture) close() {
	f.mu.Lock()
	stops := []func(){f.stopSlurm, f.stopSim}
	f.mu.Unlock()
	for _, s := range stops {
		if s != nil {
			s()
		}
	}
	if f.hubStop != nil {
		f.hubStop() // closes f.conn too
	}
}

func (f *fixture) waitClusters(ctx context.Context, limit time.Duration, ids ...string) error {
	return e2eutil.WaitClusters(ctx, f.cl, limit, ids...)
}

// ---- workloads ---------------------------------------------------------------

type wlOpt func(*meridianv1.Workload)

func onSlurm(w *meridianv1.Workload) {
	w.ClusterSelector = map[string]string{slurmSelKey: slurmSelVal}
}

func fractional(mode meridianv1.FractionalMode) wlOpt {
	return func(w *meridianv1.Workload) { w.PodSets[0].Resources.FractionalMode = mode }
}

// simFor sets how long the workload runs on the simulated cluster.
func simFor(d time.Duration) wlOpt {
	return func(w *meridianv1.Workload) { w.Labels[simcluster.LabelDuration] = d.String() }
}

// workload is one pod set of replicas x milli H100 running script under
// Slurm, in dir.
func workload(name string, replicas, milli int32, script, dir string, opts ...wlOpt) *meridianv1.Workload {
	w := &meridianv1.Workload{
		Name: name, Queue: testQueue, Labels: map[string]string{},
		PodSets: []*meridianv1.PodSet{{Name: "main", Replicas: replicas,
			Resources: &meridianv1.Resources{GpuMilli: milli, AcceleratorClass: h100}}},
		Runtime: &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Slurm{Slurm: &meridianv1.SlurmTemplate{
			Script: "#!/bin/bash\n" + script + "\n", Workdir: dir, TimeLimit: durationpb.New(5 * time.Minute)}}},
	}
	for _, o := range opts {
		o(w)
	}
	return w
}

// submitREST submits w through the REST gateway and returns its id.
func (f *fixture) submitREST(t *testing.T, w *meridianv1.Workload) string {
	t.Helper()
	body, err := protojson.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.rest+"/v1/workloads", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	f.h.Authorize(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/workloads: %v", err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/workloads: %d %s", resp.StatusCode, out)
	}
	var sub meridianv1.SubmitWorkloadResponse
	if err := protojson.Unmarshal(out, &sub); err != nil {
		t.Fatalf("decode submit response: %v\n%s", err, out)
	}
	if sub.GetWorkload().GetId() == "" {
		t.Fatalf("submit returned no id: %s", out)
	}
	return sub.GetWorkload().GetId()
}

// jobOf returns the one Slurm job of dispatch id (failing when there is
// none or more than one).
func (f *fixture) jobsOf(t *testing.T, dispatchID string) []slurm.JobInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jobs, err := f.local.Jobs(ctx, f.slurmID)
	if err != nil {
		t.Fatalf("list Slurm jobs: %v", err)
	}
	var out []slurm.JobInfo
	for _, j := range jobs {
		if tag, _ := slurm.ParseComment(j.Comment); tag.DispatchID == dispatchID {
			out = append(out, j)
		}
	}
	return out
}

func (f *fixture) oneJob(t *testing.T, dispatchID string) slurm.JobInfo {
	t.Helper()
	jobs := f.jobsOf(t, dispatchID)
	if len(jobs) != 1 {
		t.Fatalf("dispatch %s has %d Slurm jobs, want exactly 1: %+v", dispatchID, len(jobs), jobs)
	}
	return jobs[0]
}

// slurmCapacity is the H100 capacity the hub lists for the Slurm spoke.
func (f *fixture) capacity(t *testing.T, id string) (total int64, freeWhole int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := f.cl.GetCluster(ctx, &meridianv1.GetClusterRequest{Id: id})
	if err != nil {
		t.Fatalf("get cluster %s: %v", id, err)
	}
	for _, cc := range c.GetCapacity() {
		if cc.GetAcceleratorClass() == h100 {
			return cc.GetTotalMilli(), cc.GetFreeWholeGpus()
		}
	}
	return 0, 0
}

func squash(s string) string { return strings.Join(strings.Fields(s), " ") }
