package sim

import (
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/meridian-gpu/meridian/hub/quota"
	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// Scenario is a simulation input, written as YAML or JSON.
type Scenario struct {
	Name string `json:"name"`
	// Seed drives every random choice of the generator.
	Seed int64 `json:"seed"`
	// Duration is how much simulated time to run (e.g. "48h").
	Duration Duration `json:"duration"`
	// SchedulePeriod is how often the hub runs a scheduling cycle.
	SchedulePeriod Duration `json:"schedulePeriod"`
	// HalfLife is the fairshare ledger's decay half-life.
	HalfLife Duration `json:"halfLife"`
	// Warmup excludes the start from share measurements.
	Warmup   Duration        `json:"warmup"`
	Clusters []ClusterSpec   `json:"clusters"`
	Queues   []QueueSpec     `json:"queues"`
	Jobs     []JobSpec       `json:"jobs,omitempty"`
	Generate []GeneratorSpec `json:"generate,omitempty"`
}

// ClusterSpec describes one simulated cluster as groups of identical nodes.
type ClusterSpec struct {
	ID              string            `json:"id"`
	Labels          map[string]string `json:"labels,omitempty"`
	FractionalModes []string          `json:"fractionalModes,omitempty"`
	NodeGroups      []NodeGroup       `json:"nodeGroups"`
}

// NodeGroup is Count nodes with the same shape.
type NodeGroup struct {
	Count int    `json:"count"`
	Class string `json:"class"`
	GPUs  int    `json:"gpus"`
	// GPUMemoryMiB per GPU.
	GPUMemoryMiB int32 `json:"gpuMemoryMiB"`
	CPUMilli     int64 `json:"cpuMilli"`
	MemoryMiB    int64 `json:"memoryMiB"`
	// NodesPerNVLink groups consecutive nodes into NVLink domains (0 = none).
	NodesPerNVLink int `json:"nodesPerNVLink"`
	// NodesPerRack groups consecutive nodes into racks (0 = one rack).
	NodesPerRack int `json:"nodesPerRack"`
}

// QueueSpec is a queue of the tree with its quota in whole GPUs per class.
type QueueSpec struct {
	Path   string               `json:"path"`
	Weight float64              `json:"weight"`
	Quota  map[string]QuotaSpec `json:"quota,omitempty"`
}

// QuotaSpec is one class's quota in GPUs; nil limits mean unlimited.
type QuotaSpec struct {
	Nominal float64  `json:"nominal"`
	Borrow  *float64 `json:"borrowLimit,omitempty"`
	Lend    *float64 `json:"lendLimit,omitempty"`
}

// JobSpec is one workload with its arrival time and run time.
type JobSpec struct {
	ID          string   `json:"id"`
	Queue       string   `json:"queue"`
	Arrival     Duration `json:"arrival"`
	Runtime     Duration `json:"runtime"`
	Priority    int32    `json:"priority"`
	Preemptible *bool    `json:"preemptible,omitempty"`
	Replicas    int32    `json:"replicas"`
	MinReplicas int32    `json:"minReplicas,omitempty"`
	// GPUMilli per replica: 1000 per whole GPU, below 1000 for a fraction.
	GPUMilli int32  `json:"gpuMilli"`
	Class    string `json:"class,omitempty"`
	Topology string `json:"topology,omitempty"`
}

// GeneratorSpec draws a stream of jobs for one queue: Poisson arrivals,
// log-uniform run times, and a size mix.
type GeneratorSpec struct {
	Queue string `json:"queue"`
	// JobsPerHour is the mean arrival rate.
	JobsPerHour float64  `json:"jobsPerHour"`
	MinRuntime  Duration `json:"minRuntime"`
	MaxRuntime  Duration `json:"maxRuntime"`
	// Sizes lists GPU counts per job (whole GPUs, 1 replica) or gangs
	// written "NxG" (N replicas of G GPUs); each equally likely.
	Sizes    []string `json:"sizes"`
	Class    string   `json:"class,omitempty"`
	Priority int32    `json:"priority,omitempty"`
}

// Duration is a time.Duration written as "90s", "2h".
type Duration time.Duration

// UnmarshalJSON accepts a Go duration string or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if v, err := time.ParseDuration(s); err == nil {
		*d = Duration(v)
		return nil
	}
	var secs float64
	if _, err := fmt.Sscanf(s, "%g", &secs); err == nil {
		*d = Duration(time.Duration(secs * float64(time.Second)))
		return nil
	}
	return fmt.Errorf("invalid duration %q (want e.g. \"90s\" or \"2h\")", s)
}

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Duration(d).String() + `"`), nil
}

// ParseScenario decodes YAML or JSON and validates it; errors name the field.
func ParseScenario(data []byte) (*Scenario, error) {
	var s Scenario
	if err := yaml.UnmarshalStrict(data, &s); err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Validate checks the scenario and fills defaults.
func (s *Scenario) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if s.Duration <= 0 {
		bad("duration", "must be positive")
	}
	if s.SchedulePeriod == 0 {
		s.SchedulePeriod = Duration(10 * time.Second)
	}
	if s.SchedulePeriod < 0 {
		bad("schedulePeriod", "must be positive")
	}
	if s.HalfLife == 0 {
		s.HalfLife = Duration(time.Hour)
	}
	if len(s.Clusters) == 0 {
		bad("clusters", "at least one cluster is required")
	}
	ids := map[string]bool{}
	for i, c := range s.Clusters {
		f := fmt.Sprintf("clusters[%d]", i)
		if c.ID == "" {
			bad(f+".id", "required")
		}
		if ids[c.ID] {
			bad(f+".id", "duplicate cluster id %q", c.ID)
		}
		ids[c.ID] = true
		for _, m := range c.FractionalModes {
			if _, ok := ParseMode(m); !ok {
				bad(f+".fractionalModes", "unknown mode %q (want mps, mig, time-slice, memory or shard)", m)
			}
		}
		if len(c.NodeGroups) == 0 {
			bad(f+".nodeGroups", "at least one node group is required")
		}
		for j, g := range c.NodeGroups {
			gf := fmt.Sprintf("%s.nodeGroups[%d]", f, j)
			if g.Count <= 0 || g.Count > 100000 {
				bad(gf+".count", "must be 1..100000, got %d", g.Count)
			}
			if g.GPUs < 0 || g.GPUs > 64 {
				bad(gf+".gpus", "must be 0..64, got %d", g.GPUs)
			}
			if g.GPUs > 0 && g.Class == "" {
				bad(gf+".class", "required for GPU nodes")
			}
		}
	}
	if len(s.Queues) == 0 {
		bad("queues", "at least one queue is required")
	}
	for i, j := range s.Jobs {
		f := fmt.Sprintf("jobs[%d]", i)
		if j.Queue == "" {
			bad(f+".queue", "required")
		}
		if j.Replicas <= 0 {
			bad(f+".replicas", "must be at least 1")
		}
		if j.GPUMilli < 0 || (j.GPUMilli > 1000 && j.GPUMilli%1000 != 0) {
			bad(f+".gpuMilli", "must be below 1000 or a multiple of 1000, got %d", j.GPUMilli)
		}
		if j.Runtime <= 0 {
			bad(f+".runtime", "must be positive")
		}
		if _, ok := parseTopology(j.Topology); !ok {
			bad(f+".topology", "unknown topology %q (want cluster, rack, nvlink or node)", j.Topology)
		}
	}
	for i, g := range s.Generate {
		f := fmt.Sprintf("generate[%d]", i)
		if g.JobsPerHour <= 0 {
			bad(f+".jobsPerHour", "must be positive")
		}
		if g.MinRuntime <= 0 || g.MaxRuntime < g.MinRuntime {
			bad(f+".minRuntime", "need 0 < minRuntime <= maxRuntime")
		}
		if len(g.Sizes) == 0 {
			bad(f+".sizes", "at least one size is required")
		}
		for _, sz := range g.Sizes {
			if _, _, err := parseSize(sz); err != nil {
				bad(f+".sizes", "%v", err)
			}
		}
	}
	return errors.Join(errs...)
}

// ParseMode maps a fractional mode name to the core's constant.
func ParseMode(m string) (scheduler.FractionalMode, bool) {
	switch strings.ToLower(m) {
	case "any", "":
		return scheduler.FracAny, true
	case "mps":
		return scheduler.FracMPS, true
	case "mig":
		return scheduler.FracMIG, true
	case "time-slice", "timeslice", "time-slicing":
		return scheduler.FracTimeSlice, true
	case "memory":
		return scheduler.FracMemory, true
	case "shard":
		return scheduler.FracShard, true
	}
	return 0, false
}

func parseTopology(t string) (scheduler.Topology, bool) {
	switch strings.ToLower(t) {
	case "", "cluster":
		return scheduler.TopologyCluster, true
	case "rack":
		return scheduler.TopologyRack, true
	case "nvlink":
		return scheduler.TopologyNVLink, true
	case "node", "same-node":
		return scheduler.TopologySameNode, true
	}
	return 0, false
}

func parseSize(s string) (replicas, gpus int32, err error) {
	var r, g int
	if _, e := fmt.Sscanf(s, "%dx%d", &r, &g); e == nil && r > 0 && g > 0 {
		return int32(r), int32(g), nil
	}
	if _, e := fmt.Sscanf(s, "%d", &g); e == nil && g > 0 && !strings.Contains(s, "x") {
		return 1, int32(g), nil
	}
	return 0, 0, fmt.Errorf("bad size %q (want a GPU count like \"4\" or a gang like \"2x8\")", s)
}

// buildClusters turns cluster specs into the core's clusters.
func (s *Scenario) buildClusters() []scheduler.Cluster {
	var out []scheduler.Cluster
	for _, cs := range s.Clusters {
		c := scheduler.Cluster{ID: cs.ID, Labels: cs.Labels}
		for _, m := range cs.FractionalModes {
			mode, _ := ParseMode(m)
			c.Modes |= scheduler.FracModes(mode)
		}
		n := 0
		for gi, g := range cs.NodeGroups {
			mem := g.GPUMemoryMiB
			if mem == 0 {
				mem = 81920
			}
			cpu, ram := g.CPUMilli, g.MemoryMiB
			if cpu == 0 {
				cpu = 128000
			}
			if ram == 0 {
				ram = 1 << 20
			}
			for i := 0; i < g.Count; i++ {
				node := scheduler.Node{Name: fmt.Sprintf("%s-g%d-n%04d", cs.ID, gi, i),
					Res: gpufit.Node{Class: g.Class, CPUMilliFree: cpu, MemMiBFree: ram}}
				if g.NodesPerNVLink > 0 {
					node.NVLink = fmt.Sprintf("%s-g%d-nvl%d", cs.ID, gi, i/g.NodesPerNVLink)
				}
				if g.NodesPerRack > 0 {
					node.Rack = fmt.Sprintf("%s-g%d-rack%d", cs.ID, gi, i/g.NodesPerRack)
				}
				for k := 0; k < g.GPUs; k++ {
					node.Res.GPUs = append(node.Res.GPUs, gpufit.GPU{FreeMilli: 1000, FreeMemMiB: mem, TotalMemMiB: mem})
				}
				c.Nodes = append(c.Nodes, node)
				n++
			}
		}
		out = append(out, c)
	}
	return out
}

// buildTree turns queue specs into a quota tree.
func (s *Scenario) buildTree() (*quota.Tree, error) {
	var specs []quota.QueueSpec
	for _, q := range s.Queues {
		qs := quota.QueueSpec{Path: q.Path, Weight: q.Weight, Limits: map[string]quota.Limits{}}
		for class, l := range q.Quota {
			lim := quota.Limits{Nominal: int64(l.Nominal * 1000), BorrowLimit: -1, LendLimit: -1}
			if l.Borrow != nil {
				lim.BorrowLimit = int64(*l.Borrow * 1000)
			}
			if l.Lend != nil {
				lim.LendLimit = int64(*l.Lend * 1000)
			}
			qs.Limits[class] = lim
		}
		specs = append(specs, qs)
	}
	return quota.NewTree(specs)
}

// jobs returns the explicit jobs plus the generated ones, in arrival order.
func (s *Scenario) jobs() []JobSpec {
	out := append([]JobSpec(nil), s.Jobs...)
	rng := rand.New(rand.NewSource(s.Seed))
	for gi, g := range s.Generate {
		t := time.Duration(0)
		for k := 0; ; k++ {
			t += time.Duration(rng.ExpFloat64() / g.JobsPerHour * float64(time.Hour))
			if t >= time.Duration(s.Duration) {
				break
			}
			lo, hi := float64(g.MinRuntime), float64(g.MaxRuntime)
			rt := lo
			if hi > lo {
				// log-uniform: many short jobs, a few long ones
				rt = lo * pow(hi/lo, rng.Float64())
			}
			r, gp, _ := parseSize(g.Sizes[rng.Intn(len(g.Sizes))])
			out = append(out, JobSpec{
				ID:       fmt.Sprintf("%s-%d-%05d", strings.ReplaceAll(g.Queue, "/", "."), gi, k),
				Queue:    g.Queue,
				Arrival:  Duration(t),
				Runtime:  Duration(time.Duration(rt)),
				Priority: g.Priority,
				Replicas: r,
				GPUMilli: gp * 1000,
				Class:    g.Class,
			})
		}
	}
	sort.SliceStable(out, func(a, b int) bool {
		if out[a].Arrival != out[b].Arrival {
			return out[a].Arrival < out[b].Arrival
		}
		return out[a].ID < out[b].ID
	})
	return out
}
