package simcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

const small = `
fractionalModes: [mps]
defaultDuration: 10s
nodes:
  - name: gpu
    count: 2
    gpus: 2
    acceleratorClass: nvidia-a100-40gb
    gpuMemoryMiB: 40960
    cpuMilli: 16000
    memoryMiB: 65536
    rack: r1
    nvlinkDomain: d1
`

func TestParseConfigErrors(t *testing.T) {
	node := func(extra string) string {
		return "nodes:\n  - name: n1\n    gpus: 1\n    acceleratorClass: x\n    gpuMemoryMiB: 100\n    cpuMilli: 1000\n    memoryMiB: 1000\n" + extra
	}
	tests := map[string]struct {
		doc   string
		field string // "" = only the message is checked
		msg   string
	}{
		"empty":              {doc: "  \n", msg: "document is empty"},
		"bad yaml":           {doc: "nodes: [\n  - name: x", msg: "yaml"},
		"unknown field":      {doc: node("    gpu: 3\n"), field: "gpu", msg: "unknown field"},
		"no nodes":           {doc: "labels: {a: b}\n", field: "nodes", msg: "at least one node"},
		"missing name":       {doc: "nodes:\n  - gpus: 0\n    cpuMilli: 1\n    memoryMiB: 1\n", field: "nodes[0].name", msg: "required"},
		"bad name":           {doc: "nodes:\n  - name: Bad_Name\n    cpuMilli: 1\n    memoryMiB: 1\n", field: "nodes[0].name", msg: "DNS-1123"},
		"negative gpus":      {doc: "nodes:\n  - name: node\n    gpus: -1\n    cpuMilli: 1\n    memoryMiB: 1\n", field: "nodes[0].gpus", msg: "0..64"},
		"too many gpus":      {doc: "nodes:\n  - name: node\n    gpus: 65\n    cpuMilli: 1\n    memoryMiB: 1\n", field: "nodes[0].gpus", msg: "0..64"},
		"gpu without memory": {doc: "nodes:\n  - name: node\n    gpus: 1\n    acceleratorClass: x\n    cpuMilli: 1\n    memoryMiB: 1\n", field: "nodes[0].gpuMemoryMiB", msg: "required"},
		"gpu without class":  {doc: "nodes:\n  - name: node\n    gpus: 1\n    gpuMemoryMiB: 5\n    cpuMilli: 1\n    memoryMiB: 1\n", field: "nodes[0].acceleratorClass", msg: "required"},
		"zero cpu":           {doc: "nodes:\n  - name: node\n    memoryMiB: 1\n", field: "nodes[0].cpuMilli", msg: "1.."},
		"zero memory":        {doc: "nodes:\n  - name: node\n    cpuMilli: 1\n", field: "nodes[0].memoryMiB", msg: "1.."},
		"string gpus":        {doc: "nodes:\n  - name: node\n    gpus: many\n", msg: "gpus"},
		"bad mode":           {doc: "fractionalModes: [magic]\n" + node(""), field: "fractionalModes[0]", msg: "unknown mode"},
		"duplicate mode":     {doc: "fractionalModes: [mps, mps]\n" + node(""), field: "fractionalModes[1]", msg: "twice"},
		"bad duration":       {doc: "defaultDuration: soon\n" + node(""), msg: "duration"},
		"negative duration":  {doc: "defaultDuration: -5s\n" + node(""), field: "defaultDuration", msg: "negative"},
		"duplicate node": {doc: node("  - name: n1\n    cpuMilli: 1\n    memoryMiB: 1\n"),
			field: "nodes[1].name", msg: "also defined by nodes[0]"},
		"count clash": {doc: "nodes:\n  - name: a\n    count: 2\n    cpuMilli: 1\n    memoryMiB: 1\n  - name: a-1\n    cpuMilli: 1\n    memoryMiB: 1\n",
			field: "nodes[1].name", msg: "a-1"},
		"yaml boolean name": {doc: "nodes:\n  - name: n\n    cpuMilli: 1\n    memoryMiB: 1\n", field: "nodes[0].name", msg: "quote the name"},
		"negative count":    {doc: "nodes:\n  - name: a\n    count: -2\n    cpuMilli: 1\n    memoryMiB: 1\n", field: "nodes[0].count", msg: "0.."},
		"oversized":         {doc: strings.Repeat("#", MaxConfigBytes+1), msg: "more than"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.doc))
			if err == nil {
				t.Fatal("ParseConfig accepted a bad document")
			}
			if !IsConfigError(err) {
				t.Fatalf("error %v is not a *ConfigError", err)
			}
			ce := err.(*ConfigError)
			if tc.field != "" && ce.Field != tc.field {
				t.Errorf("field = %q, want %q (err: %v)", ce.Field, tc.field, err)
			}
			if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tc.msg)) {
				t.Errorf("error %q does not mention %q", err, tc.msg)
			}
		})
	}
}

func TestExamplesParse(t *testing.T) {
	files, err := filepath.Glob("examples/*.yaml")
	if err != nil || len(files) < 3 {
		t.Fatalf("want at least 3 example files, got %v (%v)", files, err)
	}
	classes := map[string]bool{}
	fractional := 0
	for _, f := range files {
		c, err := LoadConfig(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(c.FractionalModes) > 0 {
			fractional++
		}
		for _, n := range c.Nodes {
			if n.AcceleratorClass != "" {
				classes[n.AcceleratorClass] = true
			}
		}
		if c.TotalGPUs() == 0 {
			t.Errorf("%s has no GPUs", f)
		}
	}
	if fractional == 0 {
		t.Error("no example supports fractional GPUs")
	}
	if len(classes) < 3 {
		t.Errorf("examples use %d GPU models, want at least 3: %v", len(classes), classes)
	}
}

func TestLoadConfigMissingFile(t *testing.T) {
	_, err := LoadConfig(filepath.Join(t.TempDir(), "nope.yaml"))
	if err == nil || !os.IsNotExist(unwrapAll(err)) {
		t.Fatalf("want a not-exist error, got %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

// ---- builders ----------------------------------------------------------

type wlB struct{ w *meridianv1.Workload }

func wl(id string) *wlB { return &wlB{w: &meridianv1.Workload{Id: id, Labels: map[string]string{}}} }

func (b *wlB) podSet(name string, replicas int32, milli int32, topo meridianv1.Topology) *wlB {
	b.w.PodSets = append(b.w.PodSets, &meridianv1.PodSet{Name: name, Replicas: replicas, Topology: topo,
		Resources: &meridianv1.Resources{GpuMilli: milli, CpuMilli: 1000, MemoryMib: 1024}})
	return b
}
func (b *wlB) label(k, v string) *wlB { b.w.Labels[k] = v; return b }
func (b *wlB) minReplicas(n int32) *wlB {
	b.w.PodSets[len(b.w.PodSets)-1].MinReplicas = n
	return b
}
func (b *wlB) class(c string) *wlB {
	b.w.PodSets[len(b.w.PodSets)-1].Resources.AcceleratorClass = c
	return b
}
func (b *wlB) mode(m meridianv1.FractionalMode) *wlB {
	b.w.PodSets[len(b.w.PodSets)-1].Resources.FractionalMode = m
	return b
}
func (b *wlB) dispatch(id string, hint ...*agentv1.PodSetPlacement) *agentv1.Dispatch {
	return &agentv1.Dispatch{DispatchId: id, WorkloadId: b.w.Id, Workload: b.w, Placement: hint, Attempt: 1}
}

func hint(ps string, nodes ...string) *agentv1.PodSetPlacement {
	return &agentv1.PodSetPlacement{PodSet: ps, Nodes: nodes}
}

func newSmall(t *testing.T) (*Cluster, *FakeClock) {
	t.Helper()
	cfg, err := ParseConfig([]byte(small))
	if err != nil {
		t.Fatal(err)
	}
	clk := NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c, err := New(cfg, Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, clk
}

func freeMilli(t *testing.T, c *Cluster) map[string]int64 {
	t.Helper()
	inv, err := c.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, n := range inv.Nodes {
		for _, g := range n.Gpus {
			out[n.Name] += int64(g.FreeMilli)
		}
	}
	return out
}

func nextEvent(t *testing.T, c *Cluster) agent.WorkEvent {
	t.Helper()
	select {
	case ev := <-c.Events():
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
		return agent.WorkEvent{}
	}
}

// ---- behaviour ---------------------------------------------------------

func TestLaunchFitChargeRelease(t *testing.T) {
	ctx := context.Background()
	tests := map[string]struct {
		d         *agentv1.Dispatch
		wantNodes []string
		wantFree  map[string]int64
		reject    string
	}{
		"hint honoured": {
			d:         wl("w").podSet("main", 1, 2000, 0).dispatch("d", hint("main", "gpu-1")),
			wantNodes: []string{"gpu-1"}, wantFree: map[string]int64{"gpu-0": 2000, "gpu-1": 0},
		},
		"hint to missing node placed elsewhere": {
			d:         wl("w").podSet("main", 1, 1000, 0).dispatch("d", hint("main", "ghost")),
			wantNodes: []string{"gpu-0"}, wantFree: map[string]int64{"gpu-0": 1000, "gpu-1": 2000},
		},
		"gang spread over nodes": {
			d:         wl("w").podSet("w", 3, 1000, meridianv1.Topology_TOPOLOGY_RACK).dispatch("d"),
			wantNodes: []string{"gpu-0", "gpu-0", "gpu-1"}, wantFree: map[string]int64{"gpu-0": 0, "gpu-1": 1000},
		},
		"fractional charges milli": {
			d:         wl("w").podSet("f", 2, 300, 0).mode(meridianv1.FractionalMode_FRACTIONAL_MODE_MPS).dispatch("d"),
			wantNodes: []string{"gpu-0", "gpu-0"}, wantFree: map[string]int64{"gpu-0": 1400, "gpu-1": 2000},
		},
		"elastic starts with min replicas": {
			d:         wl("w").podSet("e", 6, 1000, 0).minReplicas(3).dispatch("d"),
			wantNodes: []string{"gpu-0", "gpu-0", "gpu-1"}, wantFree: map[string]int64{"gpu-0": 0, "gpu-1": 1000},
		},
		"same node too big":   {d: wl("w").podSet("s", 3, 1000, meridianv1.Topology_TOPOLOGY_SAME_NODE).dispatch("d"), reject: "does not fit"},
		"nothing fits":        {d: wl("w").podSet("big", 5, 1000, 0).dispatch("d"), reject: "does not fit"},
		"wrong class":         {d: wl("w").podSet("c", 1, 1000, 0).class("nvidia-h100-80gb").dispatch("d"), reject: "accelerator class"},
		"unsupported mode":    {d: wl("w").podSet("m", 1, 500, 0).mode(meridianv1.FractionalMode_FRACTIONAL_MODE_MIG).dispatch("d"), reject: "mig"},
		"bad duration label":  {d: wl("w").podSet("m", 1, 1000, 0).label(LabelDuration, "forever").dispatch("d"), reject: "workload.labels[" + LabelDuration + "]"},
		"bad exit code label": {d: wl("w").podSet("m", 1, 1000, 0).label(LabelExitCode, "300").dispatch("d"), reject: "workload.labels[" + LabelExitCode + "]"},
		"bad exit code env": {d: func() *agentv1.Dispatch {
			b := wl("w").podSet("m", 1, 1000, 0)
			b.w.Runtime = &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Container{Container: &meridianv1.ContainerTemplate{
				Image: "x", Env: map[string]string{EnvExitCode: "-1"}}}}
			return b.dispatch("d")
		}(), reject: "workload.runtime env " + EnvExitCode},
		"no workload":            {d: &agentv1.Dispatch{DispatchId: "d"}, reject: "workload"},
		"no pod sets":            {d: wl("w").dispatch("d"), reject: "pod_sets"},
		"hint with wrong length": {d: wl("w").podSet("main", 5, 1000, 0).dispatch("d", hint("main", "gpu-0")), reject: "placement[main].replicas"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, _ := newSmall(t)
			err := c.Launch(ctx, tc.d)
			if tc.reject != "" {
				if !agent.IsRejected(err) {
					t.Fatalf("want a rejection, got %v", err)
				}
				if !strings.Contains(agent.RejectReason(err), tc.reject) {
					t.Errorf("reason %q does not mention %q", agent.RejectReason(err), tc.reject)
				}
				if got := freeMilli(t, c); got["gpu-0"] != 2000 || got["gpu-1"] != 2000 {
					t.Errorf("a rejected launch left capacity charged: %v", got)
				}
				if c.Launches() != 0 {
					t.Errorf("launches = %d after a rejection", c.Launches())
				}
				return
			}
			if err != nil {
				t.Fatalf("Launch: %v", err)
			}
			list, _ := c.List(ctx)
			if len(list) != 1 || strings.Join(list[0].Nodes, ",") != strings.Join(tc.wantNodes, ",") {
				t.Fatalf("placed on %+v, want %v", list, tc.wantNodes)
			}
			got := freeMilli(t, c)
			for n, want := range tc.wantFree {
				if got[n] != want {
					t.Errorf("free milli on %s = %d, want %d", n, got[n], want)
				}
			}
			if err := c.Cancel(ctx, "d", false); err != nil {
				t.Fatal(err)
			}
			if got := freeMilli(t, c); got["gpu-0"] != 2000 || got["gpu-1"] != 2000 {
				t.Errorf("capacity not returned after cancel: %v", got)
			}
		})
	}
}

func TestDurationAndExitCodes(t *testing.T) {
	ctx := context.Background()
	tests := map[string]struct {
		w        *wlB
		advance  time.Duration
		state    agent.WorkState
		exitCode int32
	}{
		"label duration succeeds": {w: wl("w").podSet("m", 1, 1000, 0).label(LabelDuration, "30s"), advance: 30 * time.Second, state: agent.StateSucceeded},
		"default duration":        {w: wl("w").podSet("m", 1, 1000, 0), advance: 10 * time.Second, state: agent.StateSucceeded},
		"exit code label fails": {w: wl("w").podSet("m", 1, 1000, 0).label(LabelDuration, "5s").label(LabelExitCode, "3"),
			advance: 5 * time.Second, state: agent.StateFailed, exitCode: 3},
		"env duration and exit code": {w: func() *wlB {
			b := wl("w").podSet("m", 1, 1000, 0)
			b.w.Runtime = &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Container{Container: &meridianv1.ContainerTemplate{
				Image: "x", Env: map[string]string{EnvDuration: "2m", EnvExitCode: "137"}}}}
			return b
		}(), advance: 2 * time.Minute, state: agent.StateFailed, exitCode: 137},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, clk := newSmall(t)
			if err := c.Launch(ctx, tc.w.dispatch("d")); err != nil {
				t.Fatal(err)
			}
			if ev := nextEvent(t, c); ev.State != agent.StateRunning || ev.DispatchID != "d" || ev.WorkloadID != "w" {
				t.Fatalf("first event %+v, want Running for d/w", ev)
			}
			clk.Advance(tc.advance - time.Millisecond)
			if c.Running() != 1 {
				t.Fatal("work finished before its duration")
			}
			clk.Advance(time.Millisecond)
			ev := nextEvent(t, c)
			if ev.State != tc.state {
				t.Fatalf("state %v, want %v (%+v)", ev.State, tc.state, ev)
			}
			if ev.ExitCode == nil || *ev.ExitCode != tc.exitCode {
				t.Errorf("exit code %v, want %d", ev.ExitCode, tc.exitCode)
			}
			if ev.WallTime != tc.advance {
				t.Errorf("wall time %v, want %v", ev.WallTime, tc.advance)
			}
			if want := int64(1000 * tc.advance / time.Second); ev.GPUMilliSeconds != want {
				t.Errorf("usage %d gpu-milli-s, want %d", ev.GPUMilliSeconds, want)
			}
			if got := freeMilli(t, c); got["gpu-0"] != 2000 {
				t.Errorf("capacity not released at the end: %v", got)
			}
		})
	}
}

func TestLaunchIdempotent(t *testing.T) {
	ctx := context.Background()
	c, clk := newSmall(t)
	d := wl("w").podSet("m", 1, 1000, 0).dispatch("d")
	for i := 0; i < 3; i++ {
		if err := c.Launch(ctx, d); err != nil {
			t.Fatalf("launch %d: %v", i, err)
		}
	}
	if c.Launches() != 1 {
		t.Fatalf("launches = %d, want 1", c.Launches())
	}
	if got := freeMilli(t, c); got["gpu-0"]+got["gpu-1"] != 3000 {
		t.Fatalf("charged more than once: %v", got)
	}
	clk.Advance(10 * time.Second)
	nextEvent(t, c)
	nextEvent(t, c)
	// After it finished, a redelivery is still a no-op.
	if err := c.Launch(ctx, d); err != nil || c.Launches() != 1 || c.Running() != 0 {
		t.Fatalf("relaunch after finish: err %v launches %d running %d", err, c.Launches(), c.Running())
	}
}

func TestHooks(t *testing.T) {
	ctx := context.Background()
	c, _ := newSmall(t)
	c.RejectDispatch("r", "told to")
	if err := c.Launch(ctx, wl("w").podSet("m", 1, 1000, 0).dispatch("r")); !agent.IsRejected(err) || agent.RejectReason(err) != "told to" {
		t.Fatalf("RejectDispatch: %v", err)
	}
	c.SetRejectAll("maintenance")
	if err := c.Launch(ctx, wl("w").podSet("m", 1, 1000, 0).dispatch("x")); agent.RejectReason(err) != "maintenance" {
		t.Fatalf("SetRejectAll: %v", err)
	}
	c.SetRejectAll("")
	if err := c.Launch(ctx, wl("w").podSet("m", 1, 1000, 0).dispatch("f")); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, c)
	if !c.Fail("f", 42, "oom") {
		t.Fatal("Fail returned false for running work")
	}
	ev := nextEvent(t, c)
	if ev.State != agent.StateFailed || ev.ExitCode == nil || *ev.ExitCode != 42 || !strings.Contains(ev.Reason, "oom") {
		t.Fatalf("Fail event %+v", ev)
	}
	if c.Fail("f", 1, "") {
		t.Error("Fail on finished work returned true")
	}
	if err := c.Launch(ctx, wl("w").podSet("m", 1, 1000, 0).label(LabelReject, "quota on site").dispatch("lbl")); agent.RejectReason(err) != "quota on site" {
		t.Fatalf("reject label: %v", err)
	}
	if !c.SetSchedulable("gpu-0", false) || c.SetSchedulable("ghost", false) {
		t.Fatal("SetSchedulable: wrong existence answer")
	}
	// f ended; gpu-0 is cordoned, so a hint to gpu-0 lands on gpu-1.
	if err := c.Launch(ctx, wl("w").podSet("m", 1, 1000, 0).dispatch("h", hint("m", "gpu-0"))); err != nil {
		t.Fatal(err)
	}
	list, _ := c.List(ctx)
	for _, w := range list {
		if w.DispatchID == "h" && (len(w.Nodes) != 1 || w.Nodes[0] != "gpu-1") {
			t.Fatalf("placed on %v while gpu-0 is cordoned", w.Nodes)
		}
	}
	inv, _ := c.Inventory(ctx)
	if inv.Nodes[0].Name != "gpu-0" || inv.Nodes[0].Schedulable || !inv.Nodes[1].Schedulable {
		t.Fatalf("schedulable flags not advertised: %v %v", inv.Nodes[0].Schedulable, inv.Nodes[1].Schedulable)
	}
	c.SetVanished(true)
	if !c.Vanished() {
		t.Error("Vanished false after SetVanished(true)")
	}
}

func TestCancelAndPreempt(t *testing.T) {
	ctx := context.Background()
	tests := map[string]struct {
		preempt bool
		want    agent.WorkState
	}{
		"cancel":  {false, agent.StateCancelled},
		"preempt": {true, agent.StatePreempted},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, clk := newSmall(t)
			if err := c.Launch(ctx, wl("w").podSet("m", 1, 1000, 0).dispatch("d")); err != nil {
				t.Fatal(err)
			}
			nextEvent(t, c)
			if err := c.Cancel(ctx, "d", tc.preempt); err != nil {
				t.Fatal(err)
			}
			if ev := nextEvent(t, c); ev.State != tc.want {
				t.Fatalf("event %v, want %v", ev.State, tc.want)
			}
			// Second cancel and cancel of unknown work are no-ops.
			if err := c.Cancel(ctx, "d", tc.preempt); err != nil {
				t.Fatal(err)
			}
			if err := c.Cancel(ctx, "ghost", tc.preempt); err != nil {
				t.Fatal(err)
			}
			clk.Advance(time.Hour) // the stopped timer must not fire
			select {
			case ev := <-c.Events():
				t.Fatalf("unexpected event after cancel: %+v", ev)
			case <-time.After(50 * time.Millisecond):
			}
		})
	}
}

func TestScaledClock(t *testing.T) {
	if _, err := NewScaledClock(0); err == nil {
		t.Error("scale 0 accepted")
	}
	c, err := NewScaledClock(600)
	if err != nil {
		t.Fatal(err)
	}
	fired := make(chan time.Time, 1)
	t0 := c.Now()
	c.AfterFunc(time.Minute, func() { fired <- c.Now() }) // 100ms of wall time
	select {
	case at := <-fired:
		if at.Sub(t0) < time.Minute {
			t.Errorf("fired after %v simulated, want >= 1m", at.Sub(t0))
		}
		// A simulated minute is a tenth of a wall second at scale 600.
		if w := c.Wall(at).Sub(c.Wall(t0)); w < 100*time.Millisecond || w > 5*time.Second {
			t.Errorf("wall time between the two = %v, want about 100ms", w)
		}
		if d := time.Since(c.Wall(at)); d < -50*time.Millisecond || d > 5*time.Second {
			t.Errorf("Wall(now) is %v away from the wall clock", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("scaled timer did not fire")
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(small))
	f.Add([]byte("nodes: []"))
	f.Add([]byte("nodes:\n - name: a\n   count: 100000\n   cpuMilli: 1\n   memoryMiB: 1\n"))
	for _, p := range []string{"examples/h100-nvlink.yaml", "examples/a100-fractional.yaml"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			if !IsConfigError(err) {
				t.Fatalf("error is not a ConfigError: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("parsed config does not validate: %v", err)
		}
		cl, err := New(c, Options{Clock: NewFakeClock(time.Unix(0, 0))})
		if err != nil {
			t.Fatalf("New on a valid config: %v", err)
		}
		cl.Close()
	})
}

func TestEmbeddedExamples(t *testing.T) {
	names := ExampleNames()
	if len(names) < 3 {
		t.Fatalf("ExampleNames = %v, want at least 3", names)
	}
	for _, n := range names {
		c, err := Example(n)
		if err != nil {
			t.Fatalf("Example(%s): %v", n, err)
		}
		fromFile, err := LoadConfig(filepath.Join("examples", n+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if c.TotalGPUs() != fromFile.TotalGPUs() || len(c.Nodes) != len(fromFile.Nodes) {
			t.Errorf("%s: embedded copy differs from the file", n)
		}
	}
	if _, err := Example("nope"); err == nil || !strings.Contains(err.Error(), names[0]) {
		t.Errorf("Example(nope) = %v, want an error listing the examples", err)
	}
}

// A simulated cluster forgets the oldest finished work beyond
// MaxFinishedKept, so a long-running demo does not grow without bound;
// running work and the newest finished work are kept.
func TestFinishedWorkIsForgottenOldestFirst(t *testing.T) {
	ctx := context.Background()
	c, clk := newSmall(t)
	const extra = 3
	for i := 0; i < MaxFinishedKept+extra; i++ {
		if err := c.Launch(ctx, wl(fmt.Sprintf("w%d", i)).podSet("m", 1, 1000, 0).label(LabelDuration, "1s").dispatch(fmt.Sprintf("d%d", i))); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
	}
	if err := c.Launch(ctx, wl("live").podSet("m", 1, 1000, 0).label(LabelDuration, "1h").dispatch("live")); err != nil {
		t.Fatal(err)
	}
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]agent.WorkState{}
	for _, s := range list {
		have[s.DispatchID] = s.State
	}
	if len(have) != MaxFinishedKept+1 {
		t.Fatalf("List reports %d works, want %d finished and 1 running", len(have), MaxFinishedKept)
	}
	for i := 0; i < extra; i++ {
		if _, ok := have[fmt.Sprintf("d%d", i)]; ok {
			t.Fatalf("d%d, among the oldest finished, is still remembered", i)
		}
	}
	if have[fmt.Sprintf("d%d", MaxFinishedKept+extra-1)] != agent.StateSucceeded || have["live"] != agent.StateRunning {
		t.Fatalf("newest finished %v, running %v", have[fmt.Sprintf("d%d", MaxFinishedKept+extra-1)], have["live"])
	}
}

// TestInventoryReusesUnchangedNodes: a node that did not change is the same
// *Node as in the last inventory (the agent skips comparing it); one that
// changed is a new message, and the one handed out before keeps what it
// said (the Connector contract: a returned node never changes).
func TestInventoryReusesUnchangedNodes(t *testing.T) {
	ctx := context.Background()
	c, _ := newSmall(t)
	nodes := func() map[string]*agentv1.Node {
		t.Helper()
		inv, err := c.Inventory(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*agentv1.Node{}
		for _, n := range inv.Nodes {
			out[n.Name] = n
		}
		return out
	}
	before := nodes()
	if again := nodes(); again["gpu-0"] != before["gpu-0"] || again["gpu-1"] != before["gpu-1"] {
		t.Fatal("an unchanged node was reported as a new message")
	}
	if err := c.Launch(ctx, wl("w").podSet("main", 1, 1000, 0).dispatch("d", hint("main", "gpu-0"))); err != nil {
		t.Fatal(err)
	}
	after := nodes()
	if after["gpu-0"] == before["gpu-0"] {
		t.Fatal("the node that took the launch is the same message as before it")
	}
	if after["gpu-1"] != before["gpu-1"] {
		t.Error("the untouched node was rebuilt")
	}
	free := func(n *agentv1.Node) (m int32) {
		for _, g := range n.Gpus {
			m += g.FreeMilli
		}
		return m
	}
	if free(before["gpu-0"]) != 2000 || free(after["gpu-0"]) != 1000 {
		t.Errorf("gpu-0 free: before %d (want 2000, unchanged), after %d (want 1000)", free(before["gpu-0"]), free(after["gpu-0"]))
	}
	if !c.SetSchedulable("gpu-1", false) {
		t.Fatal("gpu-1 unknown")
	}
	if cordoned := nodes()["gpu-1"]; cordoned == after["gpu-1"] || cordoned.Schedulable || !after["gpu-1"].Schedulable {
		t.Error("a cordon did not give gpu-1 a new, unschedulable message while keeping the old one schedulable")
	}
}
