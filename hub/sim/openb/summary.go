package openb

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Pct is a percentage that encodes NaN (no sample) as JSON null.
type Pct float64

// MarshalJSON writes the value rounded to two decimals, or null for NaN/Inf.
func (p Pct) MarshalJSON() ([]byte, error) {
	f := float64(p)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return []byte(strconv.FormatFloat(math.Round(f*100)/100, 'f', -1, 64)), nil
}

// Summary aggregates the seeds of one (pod list, policy, clusters) run.
type Summary struct {
	PodList  string  `json:"pod_list"`
	Policy   string  `json:"policy"`
	Pipeline string  `json:"pipeline"`
	Clusters int     `json:"clusters"`
	Tune     float64 `json:"tune"`
	Seeds    []int64 `json:"seeds"`
	At100    []Pct   `json:"alloc_pct_at_100_per_seed"`
	At130    []Pct   `json:"alloc_pct_at_130_per_seed"`
	Mean100  Pct     `json:"mean_100"`
	Mean130  Pct     `json:"mean_130"`
	Std100   Pct     `json:"stddev_100"`
	Std130   Pct     `json:"stddev_130"`
	Placed   []int   `json:"placed_per_seed"`
	Failed   []int   `json:"failed_per_seed"`
	// Published is the paper's mean at 100/130 for this pod list and
	// policy, when the published file has it.
	Published map[string]Pct `json:"published,omitempty"`
}

// Summarize aggregates per-seed results (all of one pod list and policy).
func Summarize(podList string, tune float64, results []*Result) Summary {
	s := Summary{PodList: podList, Tune: tune}
	for _, r := range results {
		s.Policy, s.Pipeline, s.Clusters = r.Policy, r.Pipeline, r.Clusters
		s.Seeds = append(s.Seeds, r.Seed)
		s.At100 = append(s.At100, Pct(r.AllocAt(100)))
		s.At130 = append(s.At130, Pct(r.AllocAt(130)))
		s.Placed = append(s.Placed, r.Placed)
		s.Failed = append(s.Failed, r.Failed)
	}
	m, sd := meanStd(s.At100)
	s.Mean100, s.Std100 = Pct(m), Pct(sd)
	m, sd = meanStd(s.At130)
	s.Mean130, s.Std130 = Pct(m), Pct(sd)
	return s
}

// meanStd returns the mean and the sample standard deviation of the finite
// values (NaN when there are none).
func meanStd[T ~float64](v []T) (float64, float64) {
	var sum float64
	var n int
	for _, x := range v {
		if !math.IsNaN(float64(x)) {
			sum += float64(x)
			n++
		}
	}
	if n == 0 {
		return math.NaN(), math.NaN()
	}
	m := sum / float64(n)
	if n == 1 {
		return m, 0
	}
	var ss float64
	for _, x := range v {
		if !math.IsNaN(float64(x)) {
			ss += (float64(x) - m) * (float64(x) - m)
		}
	}
	return m, math.Sqrt(ss / float64(n-1))
}

// Published holds the paper artifact's allocation curves:
// curves[workload][policy label][seed] = allocation % by arrived load.
type Published struct {
	curves map[string]map[string]map[int64][]float64
}

// LoadPublished parses published_alloc_by_arrival.csv (columns
// workload,sc_policy,tune,seed,total_gpus,0..130).
func LoadPublished(r io.Reader, name string) (*Published, error) {
	t, err := readTable(r, name, []string{"workload", "sc_policy", "seed", "0", "130"})
	if err != nil {
		return nil, err
	}
	p := &Published{curves: map[string]map[string]map[int64][]float64{}}
	for i := range t.rows {
		w, pol := t.str(i, "workload"), t.str(i, "sc_policy")
		seed, err := t.int(i, "seed")
		if err != nil {
			return nil, err
		}
		c := make([]float64, MaxArrivalPct+1)
		for pct := 0; pct <= MaxArrivalPct; pct++ {
			s := t.str(i, strconv.Itoa(pct))
			if s == "" {
				c[pct] = math.NaN()
				continue
			}
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return nil, fmt.Errorf("openb: %s line %d: field %d: %q is not a number", name, i+2, pct, s)
			}
			c[pct] = v
		}
		if p.curves[w] == nil {
			p.curves[w] = map[string]map[int64][]float64{}
		}
		if p.curves[w][pol] == nil {
			p.curves[w][pol] = map[int64][]float64{}
		}
		p.curves[w][pol][seed] = c
	}
	return p, nil
}

// LoadPublishedFile reads the published results from a file.
func LoadPublishedFile(path string) (*Published, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("openb: %w", err)
	}
	defer f.Close()
	return LoadPublished(f, filepath.Base(path))
}

// Curve returns the published curve of a pod list (e.g. "default" or
// "openb_pod_list_default"), a policy label (e.g. "05-BestFit") and a seed.
func (p *Published) Curve(podList, label string, seed int64) ([]float64, bool) {
	c, ok := p.curves[workloadName(podList)][label][seed]
	return c, ok
}

// Mean returns the published mean over seeds at arrived load pct.
func (p *Published) Mean(podList, label string, pct int) (float64, bool) {
	bySeed := p.curves[workloadName(podList)][label]
	if len(bySeed) == 0 || pct < 0 || pct > MaxArrivalPct {
		return math.NaN(), false
	}
	var v []float64
	for _, c := range bySeed {
		v = append(v, c[pct])
	}
	m, _ := meanStd(v)
	return m, !math.IsNaN(m)
}

func workloadName(podList string) string {
	if strings.HasPrefix(podList, "openb_pod_list_") {
		return podList
	}
	return "openb_pod_list_" + podList
}

// PodListName turns a pod-list file path into its variant name
// ("…/openb_pod_list_gpushare40.csv" -> "gpushare40").
func PodListName(path string) string {
	b := strings.TrimSuffix(filepath.Base(path), ".csv")
	return strings.TrimPrefix(b, "openb_pod_list_")
}
