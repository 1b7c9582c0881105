package openb

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// TraceSubdir is the trace's folder inside the shared data directory.
const TraceSubdir = "alibaba-gpu-v2023"

// Default file names inside the trace folder.
const (
	NodesFile = "openb_node_list_gpu_node.csv"
	// PodsFilePattern takes a pod-list variant such as "default" or "gpushare40".
	PodsFilePattern = "openb_pod_list_%s.csv"
	PublishedFile   = "published_alloc_by_arrival.csv"
)

// ErrNoData is returned by DataDir when the shared trace data is not present.
var ErrNoData = errors.New("openb trace data not found")

// DataDir locates the shared data directory: $MERIDIAN_DATA_DIR when set,
// otherwise ../shared/data relative to the repository root (the first
// directory at or above the working directory that holds go.mod). It returns
// an error wrapping ErrNoData when the trace folder is missing.
func DataDir() (string, error) {
	dir := os.Getenv("MERIDIAN_DATA_DIR")
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("openb: working directory: %w", err)
		}
		root := wd
		for {
			if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
				break
			}
			parent := filepath.Dir(root)
			if parent == root {
				return "", fmt.Errorf("%w: no go.mod above %s and MERIDIAN_DATA_DIR is unset", ErrNoData, wd)
			}
			root = parent
		}
		dir = filepath.Join(root, "..", "shared", "data")
	}
	dir = filepath.Clean(dir)
	if st, err := os.Stat(filepath.Join(dir, TraceSubdir)); err != nil || !st.IsDir() {
		return "", fmt.Errorf("%w: %s has no %s folder (set MERIDIAN_DATA_DIR)", ErrNoData, dir, TraceSubdir)
	}
	return dir, nil
}

// NodeSpec is one row of a node list.
type NodeSpec struct {
	Name     string // sn
	CPUMilli int64
	MemMiB   int64
	GPUs     int
	Model    string // GPU model; empty for CPU nodes
}

// Pod is one row of a pod list.
type Pod struct {
	Name    string
	Req     gpufit.Request
	Classes []string // allowed GPU models (gpu_spec); empty = any
	// Created and Deleted are the trace's creation_time and deletion_time
	// in seconds, when the list has them (0 otherwise); the time-based
	// replay (timed.go) uses them.
	Created, Deleted int64
}

type table struct {
	name string
	cols map[string]int
	rows [][]string
}

func readTable(r io.Reader, name string, required []string) (*table, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = false
	recs, err := cr.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("openb: %s: %w", name, err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("openb: %s: empty file, want a header row", name)
	}
	t := &table{name: name, cols: map[string]int{}, rows: recs[1:]}
	for i, h := range recs[0] {
		t.cols[strings.TrimSpace(h)] = i
	}
	for _, c := range required {
		if _, ok := t.cols[c]; !ok {
			return nil, fmt.Errorf("openb: %s: missing column %q", name, c)
		}
	}
	return t, nil
}

func (t *table) str(row int, col string) string {
	i, ok := t.cols[col]
	if !ok || i >= len(t.rows[row]) {
		return ""
	}
	return strings.TrimSpace(t.rows[row][i])
}

func (t *table) int(row int, col string) (int64, error) {
	s := t.str(row, col)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("openb: %s line %d: field %s: %q is not an integer", t.name, row+2, col, s)
	}
	if v < 0 {
		return 0, fmt.Errorf("openb: %s line %d: field %s: must be >= 0, got %d", t.name, row+2, col, v)
	}
	return v, nil
}

// LoadNodes parses a node list (columns sn,cpu_milli,memory_mib,gpu,model).
func LoadNodes(r io.Reader, name string) ([]NodeSpec, error) {
	t, err := readTable(r, name, []string{"sn", "cpu_milli", "memory_mib", "gpu", "model"})
	if err != nil {
		return nil, err
	}
	out := make([]NodeSpec, 0, len(t.rows))
	for i := range t.rows {
		n := NodeSpec{Name: t.str(i, "sn"), Model: t.str(i, "model")}
		if n.Name == "" {
			return nil, fmt.Errorf("openb: %s line %d: field sn: empty", name, i+2)
		}
		if n.CPUMilli, err = t.int(i, "cpu_milli"); err != nil {
			return nil, err
		}
		if n.MemMiB, err = t.int(i, "memory_mib"); err != nil {
			return nil, err
		}
		g, err := t.int(i, "gpu")
		if err != nil {
			return nil, err
		}
		if g > 64 {
			return nil, fmt.Errorf("openb: %s line %d: field gpu: %d GPUs on one node is out of range", name, i+2, g)
		}
		n.GPUs = int(g)
		out = append(out, n)
	}
	return out, nil
}

// LoadPods parses a pod list (columns name,cpu_milli,memory_mib,num_gpu,
// gpu_milli and optionally gpu_spec). Every pod's request is validated.
func LoadPods(r io.Reader, name string) ([]Pod, error) {
	t, err := readTable(r, name, []string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"})
	if err != nil {
		return nil, err
	}
	out := make([]Pod, 0, len(t.rows))
	for i := range t.rows {
		p := Pod{Name: t.str(i, "name")}
		if p.Name == "" {
			return nil, fmt.Errorf("openb: %s line %d: field name: empty", name, i+2)
		}
		if p.Req.CPUMilli, err = t.int(i, "cpu_milli"); err != nil {
			return nil, err
		}
		if p.Req.MemMiB, err = t.int(i, "memory_mib"); err != nil {
			return nil, err
		}
		ng, err := t.int(i, "num_gpu")
		if err != nil {
			return nil, err
		}
		gm, err := t.int(i, "gpu_milli")
		if err != nil {
			return nil, err
		}
		if ng > 1<<20 || gm > 1<<20 {
			return nil, fmt.Errorf("openb: %s line %d: field num_gpu/gpu_milli: out of range", name, i+2)
		}
		p.Req.GPUs, p.Req.Milli = int32(ng), int32(gm)
		if ng == 0 {
			p.Req.Milli = 0 // CPU-only pods carry no share
		}
		if err := p.Req.Validate(); err != nil {
			return nil, fmt.Errorf("openb: %s line %d (pod %s): %w", name, i+2, p.Name, err)
		}
		if _, ok := t.cols["deletion_time"]; ok {
			if p.Created, err = t.int(i, "creation_time"); err != nil {
				return nil, err
			}
			if p.Deleted, err = t.int(i, "deletion_time"); err != nil {
				return nil, err
			}
		}
		if spec := t.str(i, "gpu_spec"); spec != "" {
			for _, c := range strings.Split(spec, "|") {
				if c = strings.TrimSpace(c); c != "" {
					p.Classes = append(p.Classes, c)
				}
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// LoadNodesFile reads a node list from a file.
func LoadNodesFile(path string) ([]NodeSpec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("openb: %w", err)
	}
	defer f.Close()
	return LoadNodes(f, filepath.Base(path))
}

// LoadPodsFile reads a pod list from a file.
func LoadPodsFile(path string) ([]Pod, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("openb: %w", err)
	}
	defer f.Close()
	return LoadPods(f, filepath.Base(path))
}
