package slurm

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// The fixtures in testdata/ were recorded from slurmrestd v0.0.38 and the
// 22.05 commands started by scripts/slurm-up.sh (see testdata/README.md).
func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return b
}

func TestDetectAdapter(t *testing.T) {
	for _, f := range []string{"v0038_nodes_idle.json", "v0038_jobs_running.json", "v0038_sinfo_fractional.json", "v0038_squeue_running.json", "v0038_submit_ok.json"} {
		a, err := DetectAdapter(readFixture(t, f))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if a.Version() != "openapi/v0.0.38" {
			t.Fatalf("%s: adapter %s", f, a.Version())
		}
	}
	tests := map[string]string{
		"newer version": `{"meta":{"plugin":{"type":"openapi/v0.0.40"}}}`,
		"no meta":       `{"nodes":[]}`,
		"not json":      `<html>`,
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := DetectAdapter([]byte(in)); err == nil {
				t.Fatalf("DetectAdapter(%s) accepted it", in)
			}
		})
	}
	if _, err := AdapterFor("v0.0.40"); !errors.Is(err, ErrUnknownVersion) {
		t.Fatalf("AdapterFor(v0.0.40) = %v, want ErrUnknownVersion", err)
	}
	// The v0.0.38 adapter refuses a response of another version.
	if _, _, err := (v0038{}).DecodeNodes([]byte(`{"meta":{"plugin":{"type":"openapi/v0.0.39"}},"nodes":[]}`)); !errors.Is(err, ErrUnknownVersion) {
		t.Fatalf("DecodeNodes of v0.0.39 = %v, want ErrUnknownVersion", err)
	}
}

func TestDecodeNodesFixtures(t *testing.T) {
	a := v0038{}
	for _, f := range []string{"v0038_nodes_idle.json", "v0038_nodes_fractional.json", "v0038_sinfo_fractional.json", "v0038_nodes_drain_down.json"} {
		t.Run(f, func(t *testing.T) {
			nodes, errs, err := a.DecodeNodes(readFixture(t, f))
			if err != nil || len(errs) > 0 {
				t.Fatalf("DecodeNodes: %v %v", err, errs)
			}
			var names []string
			for _, n := range nodes {
				names = append(names, n.Name)
				if n.CPUs != 32 || n.MemoryMiB != 256000 {
					t.Errorf("%s: cpus %d memory %d, want 32 and 256000", n.Name, n.CPUs, n.MemoryMiB)
				}
				if n.Gres != "gpu:h100:8,shard:h100:32,mps:h100:800" {
					t.Errorf("%s: gres %q", n.Name, n.Gres)
				}
				if !reflect.DeepEqual(n.Partitions, []string{"gpu"}) {
					t.Errorf("%s: partitions %v", n.Name, n.Partitions)
				}
				if len(n.Features) != 3 || n.Features[0] != "h100" || n.Features[1] != "nvlink" {
					t.Errorf("%s: features %v", n.Name, n.Features)
				}
			}
			if !reflect.DeepEqual(names, []string{"gpu1", "gpu2", "gpu3", "gpu4"}) {
				t.Fatalf("nodes %v", names)
			}
		})
	}
	nodes, _, _ := a.DecodeNodes(readFixture(t, "v0038_nodes_drain_down.json"))
	if nodes[2].State != "down" || nodes[2].Reason != "down-test" {
		t.Errorf("gpu3 = %q reason %q, want down / down-test", nodes[2].State, nodes[2].Reason)
	}
	if nodes[3].State != "idle" || !reflect.DeepEqual(nodes[3].Flags, []string{"DRAIN"}) {
		t.Errorf("gpu4 = %q %v, want idle [DRAIN]", nodes[3].State, nodes[3].Flags)
	}
	if NodeSchedulable(nodes[3].State, nodes[3].Flags) || NodeSchedulable(nodes[2].State, nodes[2].Flags) || !NodeSchedulable(nodes[0].State, nodes[0].Flags) {
		t.Error("drained/down nodes must not be schedulable, idle ones must")
	}
}

func TestDecodeNodesBadInput(t *testing.T) {
	tests := map[string]struct{ in, want string }{
		"nameless node":   {in: `{"nodes":[{"cpus":4}]}`, want: "nodes[0].name"},
		"negative cpus":   {in: `{"nodes":[{"name":"a","cpus":-4}]}`, want: "negative"},
		"wrong type":      {in: `{"nodes":[{"name":"a","cpus":"four"}]}`, want: "decode nodes"},
		"truncated":       {in: `{"nodes":[{"name":"a"`, want: "decode nodes"},
		"state with plus": {in: `{"nodes":[{"name":"a","state":"IDLE+DRAIN"}]}`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			nodes, _, err := (v0038{}).DecodeNodes([]byte(tc.in))
			if tc.want == "" {
				if err != nil || nodes[0].State != "idle" || !reflect.DeepEqual(nodes[0].Flags, []string{"DRAIN"}) {
					t.Fatalf("got %+v, %v; want idle with flag DRAIN", nodes, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestDecodeJobsFixtures(t *testing.T) {
	a := v0038{}
	type row struct {
		id                   int64
		state, nodes, detail string
		raw                  int64
	}
	tests := map[string][]row{
		"v0038_jobs_running.json": {
			{1, "RUNNING", "gpu[1-2]", "gpu:h100:8(IDX:0-7)", 0},
			{2, "RUNNING", "gpu3", "mps:50(IDX:0)", 0},
			{3, "RUNNING", "gpu4", "shard:2(IDX:0)", 0},
			{4, "PENDING", "", "", 0},
			{5, "FAILED", "", "", 1},
		},
		"v0038_jobs_finished.json": {
			{1, "COMPLETED", "gpu[1-2]", "", 0},
			{2, "COMPLETED", "gpu3", "", 0},
			{3, "COMPLETED", "gpu4", "", 0},
			{4, "FAILED", "gpu1", "", 768},
			{5, "FAILED", "", "", 1},
		},
	}
	for f, want := range tests {
		t.Run(f, func(t *testing.T) {
			jobs, errs, err := a.DecodeJobs(readFixture(t, f))
			if err != nil || len(errs) > 0 {
				t.Fatalf("DecodeJobs: %v %v", err, errs)
			}
			if len(jobs) != len(want) {
				t.Fatalf("%d jobs, want %d", len(jobs), len(want))
			}
			for i, w := range want {
				j := jobs[i]
				detail := ""
				if len(j.GresDetail) > 0 {
					detail = j.GresDetail[0]
				}
				if j.ID != w.id || j.State != w.state || j.Nodes != w.nodes || detail != w.detail || j.ExitCode != w.raw {
					t.Errorf("job %d = %+v, want %+v", i, j, w)
				}
			}
		})
	}
	jobs, _, _ := a.DecodeJobs(readFixture(t, "v0038_jobs_finished.json"))
	out := MapJobState(jobs[3].State, jobs[3].ExitCode, jobs[3].Reason, false)
	if out.ExitCode == nil || *out.ExitCode != 3 || !strings.Contains(out.Reason, "NonZeroExitCode") {
		t.Fatalf("job 4 (exit 3) maps to %+v", out)
	}
	if tag, ok := ParseComment(jobs[0].Comment); ok {
		t.Fatalf("a hand-written comment %q parsed as ours: %+v", jobs[0].Comment, tag)
	}
	if jobs[0].Start.IsZero() || !jobs[0].End.After(jobs[0].Start) {
		t.Fatalf("job 1 times: start %v end %v", jobs[0].Start, jobs[0].End)
	}
}

func TestDecodeSubmitAndErrors(t *testing.T) {
	a := v0038{}
	id, errs, err := a.DecodeSubmit(readFixture(t, "v0038_submit_ok.json"))
	if err != nil || len(errs) != 0 || id <= 0 {
		t.Fatalf("submit ok: id %d errs %v err %v", id, errs, err)
	}
	id, errs, err = a.DecodeSubmit(readFixture(t, "v0038_submit_impossible.json"))
	if err != nil || id != 0 || len(errs) != 1 || errs[0].Code != codeNodeConfigUnavail {
		t.Fatalf("submit impossible: id %d errs %v err %v", id, errs, err)
	}
	if reason, ok := RejectReason(&Error{Op: "submit", Backend: "rest", HTTPStatus: 500, Slurm: errs}); !ok || !strings.Contains(reason, "Requested node configuration is not available") {
		t.Fatalf("RejectReason = %q, %v", reason, ok)
	}
	del, err := a.DecodeErrors(readFixture(t, "v0038_delete_unknown.json"))
	if err != nil || len(del) != 1 || del[0].Code != codeInvalidJobID {
		t.Fatalf("delete unknown: %v %v", del, err)
	}
	if !IsJobGone(&Error{Slurm: del}) {
		t.Fatal("IsJobGone(delete of an unknown job) = false")
	}
	bad, err := a.DecodeErrors(readFixture(t, "v0038_bad_token.json"))
	if err != nil || len(bad) != 1 {
		t.Fatalf("bad token: %v %v", bad, err)
	}
	if _, ok := RejectReason(&Error{HTTPStatus: 500, Slurm: bad}); ok {
		t.Fatal("a bad token must be retried, not rejected")
	}
}

func TestRejectReasonClasses(t *testing.T) {
	tests := map[string]struct {
		err    error
		reject bool
	}{
		"impossible gres":   {err: &Error{Slurm: []SlurmError{{Code: 2014, Message: "Requested node configuration is not available"}}}, reject: true},
		"bad constraint":    {err: &Error{Slurm: []SlurmError{{Code: 2029, Message: "Invalid feature specification"}}}, reject: true},
		"bad partition":     {err: &Error{Slurm: []SlurmError{{Code: 2000, Message: "Invalid partition name specified"}}}, reject: true},
		"sbatch text":       {err: &Error{Backend: "cli", Slurm: []SlurmError{{Message: cliMessage("sbatch: error: Batch job submission failed: Invalid generic resource (gres) specification")}}}, reject: true},
		"auth":              {err: &Error{HTTPStatus: 401, Err: ErrAuth}},
		"slurmctld down":    {err: &Error{Slurm: []SlurmError{{Code: 1007, Message: "Unable to contact slurm controller (connect failure)"}}}},
		"network":           {err: &Error{Err: errors.New("dial tcp 127.0.0.1:1: connect: connection refused")}},
		"not a slurm error": {err: errors.New("boom")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if _, ok := RejectReason(tc.err); ok != tc.reject {
				t.Fatalf("RejectReason(%v) ok = %v, want %v", tc.err, ok, tc.reject)
			}
		})
	}
}

func TestEncodeSubmit(t *testing.T) {
	req := SubmitRequest{Script: "#!/bin/bash\ntrue\n", Name: "meridian-d1", Comment: Comment("", "d1", "w1"), Partition: "gpu",
		Nodes: 2, TasksPerNode: 1, CPUsPerTask: 4, MemoryPerNodeMiB: 1024, Gres: "gpu:h100:8", Constraints: "nvlink",
		Workdir: "/tmp", Env: map[string]string{"PATH": "/bin"}, TimeLimit: 90 * time.Second}
	b, err := (v0038{}).EncodeSubmit(req)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Script string         `json:"script"`
		Job    map[string]any `json:"job"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"name": "meridian-d1", "comment": "meridian:v1 dispatch=d1 workload=w1", "partition": "gpu", "nodes": 2.0,
		"tasks_per_node": 1.0, "tasks": 2.0, "cpus_per_task": 4.0, "memory_per_node": 1024.0, "gres": "gpu:h100:8", "constraints": "nvlink",
		"current_working_directory": "/tmp", "environment": map[string]any{"PATH": "/bin"}, "time_limit": 2.0, "requeue": false}
	if got.Script != req.Script || !reflect.DeepEqual(got.Job, want) {
		t.Fatalf("EncodeSubmit =\n%s\nwant job %v", b, want)
	}
	if _, err := (v0038{}).EncodeSubmit(SubmitRequest{Script: "#!/bin/sh", Switches: 1}); err == nil {
		t.Fatal("EncodeSubmit accepted --switches, which v0.0.38 cannot carry")
	}
	args := strings.Join(SbatchArgs(SubmitRequest{Name: "n", Comment: "c", Nodes: 2, TasksPerNode: 1, Gres: "gpu:8", Switches: 1, NodeList: []string{"gpu1", "gpu2"}, TimeLimit: time.Hour}), " ")
	for _, w := range []string{"--parsable", "--no-requeue", "--nodes=2", "--ntasks-per-node=1", "--gres=gpu:8", "--switches=1", "--nodelist=gpu1,gpu2", "--time=60", "--comment=c"} {
		if !strings.Contains(args, w) {
			t.Errorf("sbatch args %q lack %q", args, w)
		}
	}
}

func TestMintToken(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	tok, err := MintToken(key, "alice", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("token %q has %d parts", tok, len(parts))
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(parts[0] + "." + parts[1]))
	if base64.RawURLEncoding.EncodeToString(mac.Sum(nil)) != parts[2] {
		t.Fatal("signature does not verify with the key")
	}
	raw, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var claims map[string]any
	if err := json.Unmarshal(raw, &claims); err != nil {
		t.Fatal(err)
	}
	if claims["sun"] != "alice" || claims["iat"] != float64(now.Unix()) || claims["exp"] != float64(now.Add(time.Hour).Unix()) {
		t.Fatalf("claims %v", claims)
	}
	for name, f := range map[string]func() error{
		"no key":      func() error { _, err := MintToken(nil, "a", now, time.Hour); return err },
		"no user":     func() error { _, err := MintToken(key, "", now, time.Hour); return err },
		"no lifetime": func() error { _, err := MintToken(key, "a", now, 0); return err },
	} {
		if f() == nil {
			t.Errorf("%s: MintToken accepted it", name)
		}
	}
}

func TestBuildInventoryFixture(t *testing.T) {
	a := v0038{}
	nodes, _, err := a.DecodeNodes(readFixture(t, "v0038_nodes_fractional.json"))
	if err != nil {
		t.Fatal(err)
	}
	jobs, _, err := a.DecodeJobs(readFixture(t, "v0038_jobs_running.json"))
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := ParseTopology(string(readFixture(t, "scontrol_topology.txt")))
	c := &Connector{}
	inv, sh, err := buildInventory(nodes, jobs, leaf, invOptions{partition: "gpu", classOf: c.classOf, labels: map[string]string{"site": "lab"}})
	if err != nil {
		t.Fatal(err)
	}
	// Running jobs: gpu[1-2] 8 whole GPUs each, gpu3 mps:50 on GPU 0,
	// gpu4 shard:2 on GPU 0 (4 shards per GPU: 500 milli).
	wantFree := map[string][]int32{
		"gpu1": {0, 0, 0, 0, 0, 0, 0, 0},
		"gpu2": {0, 0, 0, 0, 0, 0, 0, 0},
		"gpu3": {500, 1000, 1000, 1000, 1000, 1000, 1000, 1000},
		"gpu4": {500, 1000, 1000, 1000, 1000, 1000, 1000, 1000},
	}
	wantRack := map[string]string{"gpu1": "leaf1", "gpu2": "leaf1", "gpu3": "leaf2", "gpu4": "leaf2"}
	if len(inv.Nodes) != 4 {
		t.Fatalf("%d nodes", len(inv.Nodes))
	}
	for _, n := range inv.Nodes {
		var free []int32
		for _, g := range n.Gpus {
			free = append(free, g.FreeMilli)
			if g.TotalMemoryMib != 81920 || g.FreeMemoryMib != 81920*int64(g.FreeMilli)/1000 || !g.Healthy {
				t.Errorf("%s gpu %d: memory %d/%d healthy %v", n.Name, g.Index, g.FreeMemoryMib, g.TotalMemoryMib, g.Healthy)
			}
		}
		if !reflect.DeepEqual(free, wantFree[n.Name]) {
			t.Errorf("%s free milli %v, want %v", n.Name, free, wantFree[n.Name])
		}
		if n.Rack != wantRack[n.Name] || n.NvlinkDomain != wantRack[n.Name] {
			t.Errorf("%s rack %q nvlink %q, want %q", n.Name, n.Rack, n.NvlinkDomain, wantRack[n.Name])
		}
		if n.AcceleratorClass != "nvidia-h100-80gb" || !n.Schedulable {
			t.Errorf("%s class %q schedulable %v", n.Name, n.AcceleratorClass, n.Schedulable)
		}
		for _, k := range []string{FeaturePrefix + "h100", FeaturePrefix + "nvlink", PartitionLabel + "gpu"} {
			if n.Labels[k] != "true" {
				t.Errorf("%s lacks label %s (labels %v)", n.Name, k, sortedKeys(n.Labels))
			}
		}
		if n.Labels[LabelShards] != "32" || n.Labels[LabelMPS] != "800" || n.Labels[LabelGresType] != "h100" {
			t.Errorf("%s labels %v", n.Name, n.Labels)
		}
		if n.CpuMilliTotal != 32000 || n.CpuMilliFree != 31000 {
			t.Errorf("%s cpu %d/%d, want 31000/32000", n.Name, n.CpuMilliFree, n.CpuMilliTotal)
		}
	}
	if inv.Labels["site"] != "lab" || inv.Labels[LabelConnector] != "slurm" {
		t.Errorf("cluster labels %v", inv.Labels)
	}
	wantModes := []meridianv1.FractionalMode{meridianv1.FractionalMode_FRACTIONAL_MODE_MPS, meridianv1.FractionalMode_FRACTIONAL_MODE_SHARD}
	if !reflect.DeepEqual(inv.FractionalModes, wantModes) {
		t.Errorf("modes %v", inv.FractionalModes)
	}
	if sh.gpusPerNode != 8 || sh.mpsPerGPU != 100 || sh.shardsPerGPU != 4 || sh.gresTypeOf["nvidia-h100-80gb"] != "h100" {
		t.Errorf("shape %+v", sh)
	}

	// Drained and down nodes.
	nodes, _, _ = a.DecodeNodes(readFixture(t, "v0038_nodes_drain_down.json"))
	inv, _, err = buildInventory(nodes, nil, leaf, invOptions{classOf: c.classOf})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*agentv1.Node{}
	for _, n := range inv.Nodes {
		byName[n.Name] = n
	}
	if byName["gpu4"].Schedulable || byName["gpu4"].Labels[LabelReason] != "maintenance-test" || byName["gpu4"].Gpus[0].FreeMilli != 1000 {
		t.Errorf("drained gpu4: %+v", byName["gpu4"])
	}
	if byName["gpu3"].Schedulable || byName["gpu3"].Gpus[0].Healthy || byName["gpu3"].Gpus[0].FreeMilli != 0 {
		t.Errorf("down gpu3 must offer nothing: %+v", byName["gpu3"])
	}
	if !byName["gpu1"].Schedulable {
		t.Error("idle gpu1 not schedulable")
	}
}
