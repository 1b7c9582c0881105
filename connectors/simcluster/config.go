package simcluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// Limits on a cluster description; they keep a hostile or mistaken file from
// exhausting memory.
const (
	MaxConfigBytes = 1 << 20
	MaxNodes       = 100000
	MaxGPUsPerNode = 64
	MaxGPUMemMiB   = 1 << 21 // 2 TiB per GPU
	MaxCPUMilli    = 1 << 30
	MaxMemoryMiB   = 1 << 36
)

// DefaultDuration is how long a workload runs when neither the cluster file
// nor the workload says.
const DefaultDuration = 30 * time.Second

// Config describes one simulated cluster.
type Config struct {
	// Labels of the cluster, matched by workloads' cluster selectors.
	Labels map[string]string `json:"labels,omitempty"`
	// FractionalModes the cluster supports: mps, mig, time-slice, memory,
	// shard. Empty means whole GPUs only.
	FractionalModes []string `json:"fractionalModes,omitempty"`
	// DefaultDuration of a workload that does not declare one.
	DefaultDuration Duration `json:"defaultDuration,omitempty"`
	// MIGStrategy is how MIG GPUs are exposed, as the NVIDIA GPU operator
	// names it: "single" (every MIG GPU cut into one profile) or "mixed"
	// (the default when a node has MIG GPUs). See docs/design/mig.md.
	MIGStrategy string `json:"migStrategy,omitempty"`
	// Nodes of the cluster.
	Nodes []NodeSpec `json:"nodes"`
}

// NodeSpec describes one node, or Count identical nodes.
type NodeSpec struct {
	// Name of the node; with Count > 1 the nodes are named <name>-0 ...
	Name string `json:"name"`
	// Count of identical nodes this entry stands for; 0 means 1.
	Count int `json:"count,omitempty"`
	// GPUs on the node (0 for a CPU-only node).
	GPUs int `json:"gpus"`
	// AcceleratorClass of the GPUs, for example nvidia-h100-80gb.
	AcceleratorClass string `json:"acceleratorClass,omitempty"`
	// GPUMemoryMiB per GPU.
	GPUMemoryMiB int64 `json:"gpuMemoryMiB,omitempty"`
	// CPUMilli allocatable on the node.
	CPUMilli int64 `json:"cpuMilli"`
	// MemoryMiB allocatable on the node.
	MemoryMiB int64 `json:"memoryMiB"`
	// Rack (switch group) of the node.
	Rack string `json:"rack,omitempty"`
	// NVLinkDomain of the node.
	NVLinkDomain string `json:"nvlinkDomain,omitempty"`
	// Labels of the node.
	Labels map[string]string `json:"labels,omitempty"`
	// MIG partitions some of the node's GPUs.
	MIG *MIGSpec `json:"mig,omitempty"`
}

// MIGSpec partitions the last GPUs of a node into MIG instances.
type MIGSpec struct {
	// GPUs is how many of the node's GPUs are MIG GPUs (the last ones); 0
	// means all of them.
	GPUs int `json:"gpus,omitempty"`
	// Instances each MIG GPU is cut into, for example
	// [3g.40gb, 4g.40gb] or seven 1g.10gb; at most 7 compute slices.
	Instances []string `json:"instances"`
}

// MIG strategies.
const (
	MIGSingle = "single"
	MIGMixed  = "mixed"
)

// migProfile is a parsed MIG profile name such as 3g.40gb.
type migProfile struct {
	name   string
	slices int
	memGB  int
}

var migRe = regexp.MustCompile(`^([1-7])g\.([1-9][0-9]{0,4})gb$`)

func parseMIG(s string) (migProfile, bool) {
	m := migRe.FindStringSubmatch(s)
	if m == nil {
		return migProfile{}, false
	}
	g, _ := strconv.Atoi(m[1])
	mem, _ := strconv.Atoi(m[2])
	return migProfile{name: s, slices: g, memGB: mem}, true
}

// milli is the profile's share of a GPU: floor(slices * 1000 / 7).
func (p migProfile) milli() int32 { return int32(min(1000, p.slices*1000/7)) }

// hasMIG reports whether any node has MIG GPUs.
func (c *Config) hasMIG() bool {
	for _, n := range c.Nodes {
		if n.MIG != nil {
			return true
		}
	}
	return false
}

// Duration is a time.Duration written as a Go duration string ("90s").
type Duration struct{ time.Duration }

// UnmarshalJSON accepts "90s" style strings.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// ConfigError is a problem in a cluster description; Field names the
// offending field, for example nodes[2].gpus.
type ConfigError struct {
	Field string
	Msg   string
}

func (e *ConfigError) Error() string {
	if e.Field == "" {
		return "simcluster config: " + e.Msg
	}
	return "simcluster config: " + e.Field + ": " + e.Msg
}

// IsConfigError reports whether err is (or wraps) a *ConfigError.
func IsConfigError(err error) bool {
	var ce *ConfigError
	return errors.As(err, &ce)
}

var (
	nameRe  = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)
	fieldRe = regexp.MustCompile(`unknown field "([^"]+)"`)
)

var modeByName = map[string]meridianv1.FractionalMode{
	"mps":        meridianv1.FractionalMode_FRACTIONAL_MODE_MPS,
	"mig":        meridianv1.FractionalMode_FRACTIONAL_MODE_MIG,
	"time-slice": meridianv1.FractionalMode_FRACTIONAL_MODE_TIME_SLICE,
	"memory":     meridianv1.FractionalMode_FRACTIONAL_MODE_MEMORY,
	"shard":      meridianv1.FractionalMode_FRACTIONAL_MODE_SHARD,
}

// ParseConfig decodes a YAML (or JSON) cluster description strictly (unknown
// fields are errors) and validates it. Every error is a *ConfigError.
func ParseConfig(data []byte) (*Config, error) {
	if len(data) > MaxConfigBytes {
		return nil, &ConfigError{Msg: fmt.Sprintf("document is %d bytes, more than %d", len(data), MaxConfigBytes)}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &ConfigError{Msg: "document is empty"}
	}
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		ce := &ConfigError{Msg: err.Error()}
		if m := fieldRe.FindStringSubmatch(err.Error()); m != nil {
			ce.Field, ce.Msg = m[1], "unknown field"
		}
		return nil, ce
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// LoadConfig reads and parses a cluster description file.
func LoadConfig(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("simcluster config %s: %w", path, err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, MaxConfigBytes+1)); err != nil {
		return nil, fmt.Errorf("simcluster config %s: %w", path, err)
	}
	c, err := ParseConfig(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Validate checks the description and names the first bad field.
func (c *Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	for k, v := range c.Labels {
		if k == "" {
			return bad("labels", "label key is empty")
		}
		if len(k) > 317 || len(v) > 63 {
			return bad("labels."+k, "label key or value too long")
		}
	}
	seenMode := map[string]bool{}
	for i, m := range c.FractionalModes {
		if _, ok := modeByName[m]; !ok {
			return bad(fmt.Sprintf("fractionalModes[%d]", i), "unknown mode %q (want one of mps, mig, time-slice, memory, shard)", m)
		}
		if seenMode[m] {
			return bad(fmt.Sprintf("fractionalModes[%d]", i), "mode %q listed twice", m)
		}
		seenMode[m] = true
	}
	switch c.MIGStrategy {
	case "", MIGSingle, MIGMixed:
	default:
		return bad("migStrategy", "unknown strategy %q (want single or mixed)", c.MIGStrategy)
	}
	if c.hasMIG() && !seenMode["mig"] {
		return bad("fractionalModes", "a node has MIG GPUs: list mig")
	}
	if c.DefaultDuration.Duration < 0 {
		return bad("defaultDuration", "must not be negative, got %s", c.DefaultDuration)
	}
	if len(c.Nodes) == 0 {
		return bad("nodes", "at least one node is required")
	}
	total := 0
	names := map[string]string{}
	for i, n := range c.Nodes {
		f := func(name string) string { return fmt.Sprintf("nodes[%d].%s", i, name) }
		switch {
		case n.Name == "":
			return bad(f("name"), "is required")
		case n.Name == "true" || n.Name == "false":
			return bad(f("name"), "%q looks like a YAML boolean (y, n, yes, no, on, off are read as booleans): quote the name", n.Name)
		case !nameRe.MatchString(n.Name):
			return bad(f("name"), "%q is not a DNS-1123 subdomain (lower-case letters, digits, '-', '.')", n.Name)
		case n.Count < 0 || n.Count > MaxNodes:
			return bad(f("count"), "must be in 0..%d, got %d", MaxNodes, n.Count)
		case n.GPUs < 0 || n.GPUs > MaxGPUsPerNode:
			return bad(f("gpus"), "must be in 0..%d, got %d", MaxGPUsPerNode, n.GPUs)
		case n.GPUMemoryMiB < 0 || n.GPUMemoryMiB > MaxGPUMemMiB:
			return bad(f("gpuMemoryMiB"), "must be in 0..%d, got %d", MaxGPUMemMiB, n.GPUMemoryMiB)
		case n.GPUs > 0 && n.GPUMemoryMiB == 0:
			return bad(f("gpuMemoryMiB"), "is required when gpus > 0")
		case n.GPUs > 0 && n.AcceleratorClass == "":
			return bad(f("acceleratorClass"), "is required when gpus > 0")
		case n.GPUs == 0 && n.AcceleratorClass != "":
			return bad(f("acceleratorClass"), "set on a node without GPUs")
		case n.CPUMilli <= 0 || n.CPUMilli > MaxCPUMilli:
			return bad(f("cpuMilli"), "must be in 1..%d, got %d", MaxCPUMilli, n.CPUMilli)
		case n.MemoryMiB <= 0 || n.MemoryMiB > MaxMemoryMiB:
			return bad(f("memoryMiB"), "must be in 1..%d, got %d", MaxMemoryMiB, n.MemoryMiB)
		}
		for k := range n.Labels {
			if k == "" {
				return bad(f("labels"), "label key is empty")
			}
		}
		if m := n.MIG; m != nil {
			switch {
			case m.GPUs < 0 || m.GPUs > n.GPUs:
				return bad(f("mig.gpus"), "must be in 0..%d (the node's gpus), got %d", n.GPUs, m.GPUs)
			case n.GPUs == 0:
				return bad(f("mig"), "set on a node without GPUs")
			case len(m.Instances) == 0:
				return bad(f("mig.instances"), "at least one instance is required")
			}
			slices := 0
			for j, name := range m.Instances {
				p, ok := parseMIG(name)
				if !ok {
					return bad(fmt.Sprintf("nodes[%d].mig.instances[%d]", i, j), "%q is not a MIG profile such as 3g.40gb", name)
				}
				if c.MIGStrategy == MIGSingle && name != m.Instances[0] {
					return bad(fmt.Sprintf("nodes[%d].mig.instances[%d]", i, j), "%s differs from %s: the single strategy cuts a GPU into one profile", name, m.Instances[0])
				}
				if int64(p.memGB)*1024 > n.GPUMemoryMiB {
					return bad(fmt.Sprintf("nodes[%d].mig.instances[%d]", i, j), "%s needs more memory than the GPU's %d MiB", name, n.GPUMemoryMiB)
				}
				slices += p.slices
			}
			if slices > 7 {
				return bad(f("mig.instances"), "take %d compute slices; a GPU has 7", slices)
			}
		}
		count := max(n.Count, 1)
		total += count
		if total > MaxNodes {
			return bad(f("count"), "the cluster would have more than %d nodes", MaxNodes)
		}
		for _, name := range expandNames(n) {
			if prev, dup := names[name]; dup {
				return bad(f("name"), "node %q is also defined by %s", name, prev)
			}
			names[name] = fmt.Sprintf("nodes[%d]", i)
		}
	}
	return nil
}

// Strategy is the MIG strategy the cluster advertises.
func (c *Config) Strategy() agentv1.MigStrategy {
	switch {
	case !c.hasMIG():
		return agentv1.MigStrategy_MIG_STRATEGY_NONE
	case c.MIGStrategy == MIGSingle:
		return agentv1.MigStrategy_MIG_STRATEGY_SINGLE
	}
	return agentv1.MigStrategy_MIG_STRATEGY_MIXED
}

// Modes returns the fractional modes as API enums, sorted.
func (c *Config) Modes() []meridianv1.FractionalMode {
	out := make([]meridianv1.FractionalMode, 0, len(c.FractionalModes))
	for _, m := range c.FractionalModes {
		out = append(out, modeByName[m])
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// TotalGPUs is the number of GPUs in the cluster.
func (c *Config) TotalGPUs() int {
	t := 0
	for _, n := range c.Nodes {
		t += n.GPUs * max(n.Count, 1)
	}
	return t
}

func expandNames(n NodeSpec) []string {
	if n.Count <= 1 {
		return []string{n.Name}
	}
	out := make([]string, n.Count)
	for i := range out {
		out[i] = n.Name + "-" + strconv.Itoa(i)
	}
	return out
}

// ModeName returns the config spelling of a fractional mode.
func ModeName(m meridianv1.FractionalMode) string {
	for k, v := range modeByName {
		if v == m {
			return k
		}
	}
	return strings.ToLower(strings.TrimPrefix(m.String(), "FRACTIONAL_MODE_"))
}
