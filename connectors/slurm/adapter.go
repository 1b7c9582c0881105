package slurm

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// NodeInfo is one Slurm node, independent of the API version it came from.
type NodeInfo struct {
	Name       string
	State      string   // base state, lower case: idle, mixed, allocated, down, ...
	Flags      []string // upper case state flags: DRAIN, NOT_RESPONDING, ...
	Reason     string
	Partitions []string
	Features   []string
	Gres       string // configured, e.g. "gpu:h100:8,shard:h100:32,mps:h100:800"
	GresUsed   string // e.g. "gpu:h100:2(IDX:0-1),shard:h100:0(IDX:N/A),..."
	CPUs       int64
	AllocCPUs  int64
	MemoryMiB  int64
	AllocMiB   int64
}

// JobInfo is one Slurm job, independent of the API version it came from.
type JobInfo struct {
	ID        int64
	Name      string
	Comment   string
	State     string // upper case: PENDING, RUNNING, COMPLETED, ...
	Reason    string // state_reason: None, Resources, NonZeroExitCode, ...
	Nodes     string // hostlist of allocated nodes
	Partition string
	// ExitCode is the raw wait status Slurm reports (768 is exit 3).
	ExitCode    int64
	Submit      time.Time
	Start       time.Time
	End         time.Time
	GresDetail  []string // one entry per allocated node, in node order
	TresPerNode string   // e.g. "gres:gpu:h100:8"
	NodeCount   int64
}

// SubmitRequest is one batch job to submit, independent of the API version.
type SubmitRequest struct {
	Script       string
	Name         string
	Comment      string
	Partition    string
	Nodes        int
	TasksPerNode int
	CPUsPerTask  int
	// MemoryPerNodeMiB is 0 for the partition default.
	MemoryPerNodeMiB int64
	Gres             string
	Constraints      string
	Workdir          string
	Env              map[string]string
	// TimeLimit is rounded up to whole minutes; 0 is the partition default.
	TimeLimit time.Duration
	// Switches is --switches (0: unset). slurmrestd v0.0.38 cannot carry it.
	Switches int
	// NodeList is --nodelist (hard pinning). slurmrestd v0.0.38 cannot carry it.
	NodeList []string
	Account  string
	QOS      string
}

// SlurmError is one error Slurm reported in a JSON response.
type SlurmError struct {
	// Code is Slurm's error number (2014 is "Requested node configuration
	// is not available"); 0 when Slurm gave none.
	Code        int
	Message     string
	Description string
}

func (e SlurmError) String() string {
	msg := e.Message
	if e.Description != "" && e.Description != msg {
		msg = strings.TrimSpace(msg + ": " + e.Description)
	}
	if e.Code != 0 {
		return fmt.Sprintf("%s (slurm error %d)", msg, e.Code)
	}
	return msg
}

// Adapter decodes and encodes one version of Slurm's JSON. The connector
// picks one by the "meta.plugin.type" of a response (see AdapterFor), so a
// new Slurm release needs only a new Adapter.
type Adapter interface {
	// Version is the plugin type it speaks, e.g. "openapi/v0.0.38".
	Version() string
	// PathPrefix is the REST path prefix, e.g. "/slurm/v0.0.38".
	PathPrefix() string
	DecodeNodes(data []byte) ([]NodeInfo, []SlurmError, error)
	DecodeJobs(data []byte) ([]JobInfo, []SlurmError, error)
	// DecodeSubmit returns the new job id (0 when Slurm gave none).
	DecodeSubmit(data []byte) (int64, []SlurmError, error)
	// DecodeErrors reads only the errors of any response.
	DecodeErrors(data []byte) ([]SlurmError, error)
	EncodeSubmit(req SubmitRequest) ([]byte, error)
}

// ErrUnknownVersion is returned by AdapterFor for an API version no adapter
// speaks.
var ErrUnknownVersion = errors.New("unsupported Slurm API version")

var adapters = map[string]Adapter{v0038{}.Version(): v0038{}}

// AdapterFor returns the adapter for a response's meta.plugin.type, or for
// a version string such as "v0.0.38".
func AdapterFor(pluginType string) (Adapter, error) {
	key := pluginType
	if !strings.HasPrefix(key, "openapi/") {
		key = "openapi/" + key
	}
	if a, ok := adapters[key]; ok {
		return a, nil
	}
	return nil, fmt.Errorf("meta.plugin.type %q: %w (supported: openapi/v0.0.38)", pluginType, ErrUnknownVersion)
}

// DetectAdapter reads meta.plugin.type from a JSON response (REST, sinfo
// --json or squeue --json) and returns its adapter.
func DetectAdapter(data []byte) (Adapter, error) {
	var probe struct {
		Meta struct {
			Plugin struct {
				Type string `json:"type"`
			} `json:"plugin"`
		} `json:"meta"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("decode meta: %w", err)
	}
	if probe.Meta.Plugin.Type == "" {
		return nil, fmt.Errorf("meta.plugin.type: missing: %w", ErrUnknownVersion)
	}
	return AdapterFor(probe.Meta.Plugin.Type)
}

// ---- v0.0.38 (Slurm 22.05) -----------------------------------------------

type v0038 struct{}

func (v0038) Version() string    { return "openapi/v0.0.38" }
func (v0038) PathPrefix() string { return "/slurm/v0.0.38" }

type v0038Error struct {
	Code        int    `json:"error_code"`
	Number      int    `json:"error_number"`
	Errno       int    `json:"errno"`
	Error       string `json:"error"`
	Description string `json:"description"`
}

type v0038Meta struct {
	Plugin struct {
		Type string `json:"type"`
	} `json:"plugin"`
}

type v0038Node struct {
	Name        string   `json:"name"`
	State       string   `json:"state"`
	StateFlags  []string `json:"state_flags"`
	Reason      string   `json:"reason"`
	Partitions  []string `json:"partitions"`
	Features    string   `json:"active_features"`
	CfgFeatures string   `json:"features"`
	Gres        string   `json:"gres"`
	GresUsed    string   `json:"gres_used"`
	CPUs        *int64   `json:"cpus"`
	AllocCPUs   *int64   `json:"alloc_cpus"`
	RealMemory  *int64   `json:"real_memory"`
	AllocMemory *int64   `json:"alloc_memory"`
}

type v0038Job struct {
	JobID          *int64   `json:"job_id"`
	Name           string   `json:"name"`
	Comment        string   `json:"comment"`
	JobState       string   `json:"job_state"`
	StateReason    string   `json:"state_reason"`
	Nodes          string   `json:"nodes"`
	Partition      string   `json:"partition"`
	ExitCode       *int64   `json:"exit_code"`
	SubmitTime     *int64   `json:"submit_time"`
	StartTime      *int64   `json:"start_time"`
	EndTime        *int64   `json:"end_time"`
	GresDetail     []string `json:"gres_detail"`
	TresPerNode    string   `json:"tres_per_node"`
	NodeCount      *int64   `json:"node_count"`
	StandardOutput string   `json:"standard_output"`
}

func (v0038) convertErrors(in []v0038Error) []SlurmError {
	var out []SlurmError
	for _, e := range in {
		code := e.Code
		if code == 0 {
			code = e.Number
		}
		if code == 0 && e.Errno > 0 {
			code = e.Errno
		}
		out = append(out, SlurmError{Code: code, Message: e.Error, Description: e.Description})
	}
	return out
}

func (a v0038) check(meta v0038Meta) error {
	if meta.Plugin.Type != "" && meta.Plugin.Type != a.Version() {
		return fmt.Errorf("meta.plugin.type: %q, the %s adapter was used: %w", meta.Plugin.Type, a.Version(), ErrUnknownVersion)
	}
	return nil
}

func (a v0038) DecodeErrors(data []byte) ([]SlurmError, error) {
	var r struct {
		Errors []v0038Error `json:"errors"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("decode errors: %w", err)
	}
	return a.convertErrors(r.Errors), nil
}

func (a v0038) DecodeNodes(data []byte) ([]NodeInfo, []SlurmError, error) {
	var r struct {
		Meta   v0038Meta    `json:"meta"`
		Errors []v0038Error `json:"errors"`
		Nodes  []v0038Node  `json:"nodes"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, nil, fmt.Errorf("decode nodes: %w", err)
	}
	if err := a.check(r.Meta); err != nil {
		return nil, nil, err
	}
	out := make([]NodeInfo, 0, len(r.Nodes))
	for i, n := range r.Nodes {
		if n.Name == "" {
			return nil, nil, fmt.Errorf("nodes[%d].name: empty", i)
		}
		feat := n.Features
		if feat == "" {
			feat = n.CfgFeatures
		}
		ni := NodeInfo{
			Name: n.Name, State: strings.ToLower(n.State), Reason: n.Reason,
			Partitions: append([]string(nil), n.Partitions...), Features: splitList(feat),
			Gres: n.Gres, GresUsed: n.GresUsed,
			CPUs: deref(n.CPUs), AllocCPUs: deref(n.AllocCPUs), MemoryMiB: deref(n.RealMemory), AllocMiB: deref(n.AllocMemory),
		}
		for _, f := range n.StateFlags {
			ni.Flags = append(ni.Flags, strings.ToUpper(f))
		}
		// Older releases fold flags into state ("idle+drain").
		if base, flags, ok := strings.Cut(ni.State, "+"); ok {
			ni.State = base
			for _, f := range strings.Split(flags, "+") {
				ni.Flags = append(ni.Flags, strings.ToUpper(f))
			}
		}
		if ni.CPUs < 0 || ni.AllocCPUs < 0 || ni.MemoryMiB < 0 || ni.AllocMiB < 0 {
			return nil, nil, fmt.Errorf("nodes[%d] (%s): negative cpus or memory", i, n.Name)
		}
		out = append(out, ni)
	}
	return out, a.convertErrors(r.Errors), nil
}

func (a v0038) DecodeJobs(data []byte) ([]JobInfo, []SlurmError, error) {
	// Decode only the fields read; same result, a fraction of the work
	// (see reduceJobs).
	if reduced := reduceJobs(data); reduced != nil {
		data = reduced
	}
	return a.decodeJobsNoReduce(data)
}

func (a v0038) decodeJobsNoReduce(data []byte) ([]JobInfo, []SlurmError, error) {
	var r struct {
		Meta   v0038Meta    `json:"meta"`
		Errors []v0038Error `json:"errors"`
		Jobs   []v0038Job   `json:"jobs"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, nil, fmt.Errorf("decode jobs: %w", err)
	}
	if err := a.check(r.Meta); err != nil {
		return nil, nil, err
	}
	out := make([]JobInfo, 0, len(r.Jobs))
	for i, j := range r.Jobs {
		if j.JobID == nil || *j.JobID <= 0 {
			return nil, nil, fmt.Errorf("jobs[%d].job_id: missing or not positive", i)
		}
		out = append(out, JobInfo{
			ID: *j.JobID, Name: j.Name, Comment: j.Comment, State: strings.ToUpper(j.JobState), Reason: j.StateReason,
			Nodes: j.Nodes, Partition: j.Partition, ExitCode: deref(j.ExitCode),
			Submit: unix(j.SubmitTime), Start: unix(j.StartTime), End: unix(j.EndTime),
			GresDetail: append([]string(nil), j.GresDetail...), TresPerNode: j.TresPerNode, NodeCount: deref(j.NodeCount),
		})
	}
	return out, a.convertErrors(r.Errors), nil
}

func (a v0038) DecodeSubmit(data []byte) (int64, []SlurmError, error) {
	var r struct {
		Meta   v0038Meta    `json:"meta"`
		Errors []v0038Error `json:"errors"`
		JobID  *int64       `json:"job_id"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return 0, nil, fmt.Errorf("decode submit response: %w", err)
	}
	if err := a.check(r.Meta); err != nil {
		return 0, nil, err
	}
	id := deref(r.JobID)
	if id < 0 {
		return 0, nil, fmt.Errorf("job_id: negative (%d)", id)
	}
	return id, a.convertErrors(r.Errors), nil
}

// EncodeSubmit writes a v0.0.38 job submission. Switches and NodeList have
// no field in v0.0.38: a request with them is an error here (the connector
// submits those with sbatch).
func (a v0038) EncodeSubmit(req SubmitRequest) ([]byte, error) {
	if req.Switches > 0 {
		return nil, fmt.Errorf("switches: not supported by slurmrestd %s", a.Version())
	}
	if len(req.NodeList) > 0 {
		return nil, fmt.Errorf("nodelist: not supported by slurmrestd %s", a.Version())
	}
	if req.Script == "" {
		return nil, errors.New("script: empty")
	}
	env := req.Env
	if env == nil {
		env = map[string]string{}
	}
	job := map[string]any{
		"name":                      req.Name,
		"comment":                   req.Comment,
		"current_working_directory": req.Workdir,
		"environment":               env,
		"requeue":                   false,
	}
	setStr := func(k, v string) {
		if v != "" {
			job[k] = v
		}
	}
	setInt := func(k string, v int64) {
		if v > 0 {
			job[k] = v
		}
	}
	setStr("partition", req.Partition)
	setStr("gres", req.Gres)
	setStr("constraints", req.Constraints)
	setStr("account", req.Account)
	setStr("qos", req.QOS)
	setInt("nodes", int64(req.Nodes))
	setInt("tasks_per_node", int64(req.TasksPerNode))
	if req.Nodes > 0 && req.TasksPerNode > 0 {
		job["tasks"] = req.Nodes * req.TasksPerNode
	}
	setInt("cpus_per_task", int64(req.CPUsPerTask))
	setInt("memory_per_node", req.MemoryPerNodeMiB)
	setInt("time_limit", minutes(req.TimeLimit))
	return json.Marshal(map[string]any{"script": req.Script, "job": job})
}

// minutes rounds d up to whole minutes (0 stays 0).
func minutes(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Minute - 1) / time.Minute)
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func unix(p *int64) time.Time {
	if p == nil || *p <= 0 {
		return time.Time{}
	}
	return time.Unix(*p, 0)
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" && f != "(null)" {
			out = append(out, f)
		}
	}
	return out
}
