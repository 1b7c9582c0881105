package slurm

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

func TestParseGres(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    []Gres
		wantErr string
	}{
		"empty": {in: ""},
		"null":  {in: "(null)"},
		"configured 22.05 node": {in: "gpu:h100:8,shard:h100:32,mps:h100:800", want: []Gres{
			{Name: "gpu", Type: "h100", Count: 8}, {Name: "shard", Type: "h100", Count: 32}, {Name: "mps", Type: "h100", Count: 800}}},
		"used with IDX ranges": {in: "gpu:h100:3(IDX:0-1,5),shard:h100:0(IDX:N/A),mps:h100:1(IDX:0)", want: []Gres{
			{Name: "gpu", Type: "h100", Count: 3, IDX: []int{0, 1, 5}}, {Name: "shard", Type: "h100", Count: 0}, {Name: "mps", Type: "h100", Count: 1, IDX: []int{0}}}},
		"socket affinity ignored": {in: "gpu:h100:8(S:0-1)", want: []Gres{{Name: "gpu", Type: "h100", Count: 8}}},
		"IDX then socket":         {in: "gpu:a100:2(IDX:2-3,S:0)", want: []Gres{{Name: "gpu", Type: "a100", Count: 2, IDX: []int{2, 3}}}},
		"untyped job detail":      {in: "mps:50(IDX:0)", want: []Gres{{Name: "mps", Count: 50, IDX: []int{0}}}},
		"name only":               {in: "gpu", want: []Gres{{Name: "gpu", Count: 1}}},
		"type without count":      {in: "gpu:h100", want: []Gres{{Name: "gpu", Type: "h100", Count: 1}}},
		"count suffix":            {in: "bandwidth:lustre:4K", want: []Gres{{Name: "bandwidth", Type: "lustre", Count: 4096}}},
		"unbalanced open":         {in: "gpu:h100:8(IDX:0", wantErr: "unbalanced '('"},
		"unbalanced close":        {in: "gpu:h100:8)", wantErr: "unbalanced ')'"},
		"bad count":               {in: "gpu:h100:x8", wantErr: "not a number"},
		"too many fields":         {in: "gpu:h100:8:9", wantErr: "more than name:type:count"},
		"empty entry":             {in: "gpu:1,,mps:2", wantErr: "empty entry"},
		"bad IDX":                 {in: "gpu:1(IDX:3-1)", wantErr: "bad range"},
		"huge IDX":                {in: "gpu:1(IDX:0-99999999)", wantErr: "bad range"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseGres(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseGres(%q) error = %v, want one containing %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseGres(%q): %v", tc.in, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseGres(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseIndexList(t *testing.T) {
	tests := map[string]struct {
		in   string
		want []int
		bad  bool
	}{
		"na":         {in: "N/A"},
		"single":     {in: "4", want: []int{4}},
		"range":      {in: "0-3", want: []int{0, 1, 2, 3}},
		"mixed":      {in: "7,0-1,5", want: []int{0, 1, 5, 7}},
		"duplicates": {in: "1,0-2,2", want: []int{0, 1, 2}},
		"negative":   {in: "-1", bad: true},
		"reversed":   {in: "5-2", bad: true},
		"garbage":    {in: "a-b", bad: true},
		"too high":   {in: "5000", bad: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseIndexList(tc.in)
			if tc.bad != (err != nil) {
				t.Fatalf("ParseIndexList(%q) error = %v, want error %v", tc.in, err, tc.bad)
			}
			if !tc.bad && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseIndexList(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestExpandHostlist(t *testing.T) {
	tests := map[string]struct {
		in   string
		want []string
		bad  bool
	}{
		"empty":           {in: ""},
		"single":          {in: "gpu1", want: []string{"gpu1"}},
		"range":           {in: "gpu[1-2]", want: []string{"gpu1", "gpu2"}},
		"ranges and list": {in: "gpu[1-2,4],cpu7", want: []string{"gpu1", "gpu2", "gpu4", "cpu7"}},
		"zero padding":    {in: "n[08-10]", want: []string{"n08", "n09", "n10"}},
		"suffix":          {in: "rack[1-2]-a", want: []string{"rack1-a", "rack2-a"}},
		"unbalanced":      {in: "gpu[1-2", bad: true},
		"reversed":        {in: "gpu[3-1]", bad: true},
		"two groups":      {in: "r[1-2]n[1-2]", bad: true},
		"too many":        {in: "n[0-99999999]", bad: true},
		"empty element":   {in: "gpu1,,gpu2", bad: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ExpandHostlist(tc.in)
			if tc.bad != (err != nil) {
				t.Fatalf("ExpandHostlist(%q) error = %v, want error %v", tc.in, err, tc.bad)
			}
			if !tc.bad && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ExpandHostlist(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseTopologyFixture(t *testing.T) {
	leaf, err := ParseTopology(string(readFixture(t, "scontrol_topology.txt")))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"gpu1": "leaf1", "gpu2": "leaf1", "gpu3": "leaf2", "gpu4": "leaf2"}
	if !reflect.DeepEqual(leaf, want) {
		t.Fatalf("ParseTopology = %v, want %v (the spine must not override leaves)", leaf, want)
	}
	if _, err := ParseTopology("SwitchName=s1 Level=0 Nodes=gpu[1-"); err == nil {
		t.Fatal("ParseTopology accepted a broken hostlist")
	}
}

func TestDecodeExit(t *testing.T) {
	tests := map[string]struct {
		raw  int64
		code int32
		sig  int
	}{
		"success":      {raw: 0, code: 0},
		"exit 1":       {raw: 256, code: 1},
		"exit 3":       {raw: 768, code: 3},
		"exit 255":     {raw: 255 << 8, code: 255},
		"SIGKILL":      {raw: 9, code: 137, sig: 9},
		"SIGTERM+core": {raw: 0x80 | 15, code: 143, sig: 15},
		"not a status": {raw: 1 << 20, code: 1 << 20},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			code, sig := DecodeExit(tc.raw)
			if code != tc.code || sig != tc.sig {
				t.Fatalf("DecodeExit(%d) = (%d, %d), want (%d, %d)", tc.raw, code, sig, tc.code, tc.sig)
			}
		})
	}
}

func TestMapJobState(t *testing.T) {
	tests := map[string]struct {
		state     string
		raw       int64
		preempted bool
		want      agent.WorkState
		exit      *int32
		reason    string
	}{
		"pending":              {state: "PENDING", want: agent.StatePending},
		"configuring":          {state: "CONFIGURING", want: agent.StatePending},
		"requeued":             {state: "REQUEUED", want: agent.StatePending},
		"running":              {state: "RUNNING", want: agent.StateRunning},
		"completing":           {state: "COMPLETING", want: agent.StateRunning},
		"suspended":            {state: "SUSPENDED", want: agent.StateRunning},
		"completed":            {state: "COMPLETED", want: agent.StateSucceeded, exit: i32(0)},
		"failed exit 3":        {state: "FAILED", raw: 768, want: agent.StateFailed, exit: i32(3), reason: "exit code 3"},
		"failed signal":        {state: "FAILED", raw: 9, want: agent.StateFailed, exit: i32(137), reason: "signal 9"},
		"timeout":              {state: "TIMEOUT", raw: 15, want: agent.StateFailed, exit: i32(143), reason: "time limit"},
		"node fail":            {state: "NODE_FAIL", want: agent.StateFailed, exit: i32(0), reason: "node failure"},
		"oom":                  {state: "OUT_OF_MEMORY", raw: 9, want: agent.StateFailed, exit: i32(137), reason: "out of memory"},
		"slurm preempted":      {state: "PREEMPTED", want: agent.StatePreempted, exit: i32(0), reason: "preempted by Slurm"},
		"cancelled":            {state: "CANCELLED", want: agent.StateCancelled, reason: "cancelled"},
		"cancelled to preempt": {state: "CANCELLED", preempted: true, want: agent.StatePreempted, reason: "preempted by the hub"},
		"lower case":           {state: "completed", want: agent.StateSucceeded, exit: i32(0)},
		"unknown":              {state: "WHATEVER", want: agent.StateUnknown, reason: "unknown slurm job state"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := MapJobState(tc.state, tc.raw, "None", tc.preempted)
			if got.State != tc.want {
				t.Fatalf("state = %v, want %v", got.State, tc.want)
			}
			if (got.ExitCode == nil) != (tc.exit == nil) || (got.ExitCode != nil && *got.ExitCode != *tc.exit) {
				t.Fatalf("exit = %v, want %v", fmtp(got.ExitCode), fmtp(tc.exit))
			}
			if !strings.Contains(got.Reason, tc.reason) {
				t.Fatalf("reason = %q, want it to contain %q", got.Reason, tc.reason)
			}
		})
	}
}

func TestNodeSchedulable(t *testing.T) {
	tests := map[string]struct {
		state       string
		flags       []string
		sched, heal bool
	}{
		"idle":           {state: "idle", sched: true, heal: true},
		"mixed":          {state: "mixed", sched: true, heal: true},
		"allocated":      {state: "allocated", sched: true, heal: true},
		"drain":          {state: "idle", flags: []string{"DRAIN"}, sched: false, heal: true},
		"draining":       {state: "mixed", flags: []string{"DRAIN"}, sched: false, heal: true},
		"down":           {state: "down", sched: false, heal: false},
		"not responding": {state: "idle", flags: []string{"NOT_RESPONDING"}, sched: false, heal: false},
		"fail":           {state: "allocated", flags: []string{"FAIL"}, sched: false, heal: false},
		"maintenance":    {state: "idle", flags: []string{"MAINTENANCE"}, sched: false, heal: true},
		"powered down":   {state: "idle", flags: []string{"POWERED_DOWN"}, sched: false, heal: false},
		"future":         {state: "future", sched: false, heal: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := NodeSchedulable(tc.state, tc.flags); got != tc.sched {
				t.Errorf("NodeSchedulable = %v, want %v", got, tc.sched)
			}
			if got := NodeHealthy(tc.state, tc.flags); got != tc.heal {
				t.Errorf("NodeHealthy = %v, want %v", got, tc.heal)
			}
		})
	}
}

func TestCommentRoundTrip(t *testing.T) {
	c := Comment("slurm-a", "d-1", "wl-01J")
	tag, ok := ParseComment(c)
	if !ok || tag != (JobTag{ClusterID: "slurm-a", DispatchID: "d-1", WorkloadID: "wl-01J"}) {
		t.Fatalf("ParseComment(%q) = %+v, %v", c, tag, ok)
	}
	for _, foreign := range []string{"", "my own job", "meridian:v1", "meridian:v2 dispatch=x", "meridian:v1 workload=w"} {
		if _, ok := ParseComment(foreign); ok {
			t.Errorf("ParseComment(%q) claimed a job the connector did not write", foreign)
		}
	}
}

func i32(v int32) *int32 { return &v }

func fmtp(p *int32) any {
	if p == nil {
		return "nil"
	}
	return *p
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
