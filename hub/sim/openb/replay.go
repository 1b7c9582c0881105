package openb

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// Defaults of the paper's experiment.
const (
	DefaultTune       = 1.3
	DefaultPopularity = 0.95 // share of pods covered by FGD's typical pod shapes
	MaxArrivalPct     = 130
)

// Policy names accepted by Config.Policy.
const (
	PolicyBestFit  = "bestfit"
	PolicyFGD      = "fgd"
	PolicyMeridian = "meridian"
	PolicyRandom   = "random"
)

// Policies lists the policy names in a stable order.
func Policies() []string {
	return []string{PolicyMeridian, PolicyFGD, PolicyBestFit, PolicyRandom}
}

// PublishedLabel maps a policy to its sc_policy label in the paper's
// published results, or "" when the paper has no such policy.
func PublishedLabel(policy string) string {
	switch policy {
	case PolicyBestFit:
		return "05-BestFit"
	case PolicyFGD:
		return "06-FGD"
	case PolicyRandom:
		return "01-Random"
	}
	return ""
}

// Config is one replay run.
type Config struct {
	Policy     string  // see Policies
	Seed       int64   // the paper uses 42..51
	Tune       float64 // target total GPU request as a multiple of capacity; <= 0 keeps the list as is
	Clusters   int     // >= 1; > 1 splits the nodes into federated clusters
	MaxPods    int     // > 0 stops after that many arrivals (for short tests)
	Popularity float64 // typical-shape coverage for FGD's target workload; 0 = DefaultPopularity
	// MeridianOptions overrides gpufit.DefaultMeridianOptions for the
	// meridian policy (for ablations); nil keeps the defaults.
	MeridianOptions *gpufit.MeridianOptions
	// MeridianFullMix gives Meridian the full arrival mix (every shape)
	// instead of FGD's typical shapes (for ablations: the full mix was
	// Meridian's target until it fell below FGD on a share-heavy mix).
	MeridianFullMix bool
	// Pipeline is how a pod's node is chosen: PipelineKernel (the
	// default) scores every feasible node with the gpufit kernel;
	// PipelineDecide sends each pod through the hub's scheduler.Decide
	// (decide.go).
	Pipeline string
	// Target is the shape mix the meridian policy scores against in the
	// decide pipeline: TargetHistory (the default: a decayed histogram of
	// past arrivals, as the live hub keeps), TargetWhole (the whole pod
	// list, look-ahead included, as the kernel replay uses) or
	// TargetPending (the hub's fallback: only the pods pending now). Each
	// is reduced to FGD's typical shapes.
	Target string
	// HistoryHalfLife is the history's half-life in arrivals (the decide
	// replay's clock advances one second per pod); 0 = DefaultHistoryHalfLife.
	HistoryHalfLife int
	// FGDLearned gives the fgd policy in the decide pipeline the target a
	// live hub could learn (the decayed history of past arrivals) instead
	// of the whole pod list's typical shapes, which look ahead.
	FGDLearned bool
	// Decide, when set, adjusts the hub's scheduler.DefaultConfig for the
	// decide pipeline (for ablations of candidate selection).
	Decide func(*scheduler.Config)
	// Progress, when set, is called every 1,000 pods and at the end.
	Progress func(done, total int)
	// ReferenceRNG makes a run seed-exact against the paper artifact's
	// per-seed curves. It replays the reference simulator's random stream
	// draw for draw: between the workload tuning and the node-rank
	// permutation it makes the draws the reference's informers make
	// (ReferenceInformerDraws). And it reads the curve off as the
	// reference's analysis scripts do (referenceCurve): no sample before
	// the first pod, Python's rounding, numpy's summation. Off, the
	// permutation follows the tuning directly and the curve is curve's (the
	// replay's historical results).
	ReferenceRNG bool
}

// ReferenceInformerDraws is how many values of the global math/rand stream
// the reference simulator consumes between tuning the workload and drawing
// its node-rank permutation. Simulator.RunCluster starts the scheduler
// (runScheduler: informerFactory.Start) before syncClusterResourceList calls
// rand.Perm, and each informer's reflector calls rand.Float64 once when it
// opens its watch (client-go v0.20.5 tools/cache/reflector.go,
// ListAndWatch: the watch timeout). The kube-scheduler v1.20.5 profile the
// reference runs starts eleven informers: Pods, Nodes, CSINodes,
// PersistentVolumes, PersistentVolumeClaims, Services and StorageClasses
// (eventhandlers.go), ReplicationControllers, ReplicaSets and StatefulSets
// (PodTopologySpread) and PodDisruptionBudgets (DefaultPreemption). The
// StorageClasses informer was started, and drew, in simulator.New, before
// core.Simulate seeds the stream, so ten draws fall in between.
// runScheduler's WaitForCacheSync polls every 100 ms, so all ten land
// before the permutation. No other code on that path uses the global rand
// (the pod-name suffixes use apimachinery's own util/rand source).
const ReferenceInformerDraws = 10

// Pipelines and targets accepted by Config.
const (
	PipelineKernel = "kernel"
	PipelineDecide = "decide"

	TargetHistory = "history"
	TargetWhole   = "whole"
	TargetPending = "pending"
)

// Result is the outcome of one replay.
type Result struct {
	Policy   string
	Pipeline string // PipelineKernel or PipelineDecide
	Seed     int64
	Clusters int

	Pods, Placed, Failed int
	CapacityMilli        int64 // total GPU milli of the cluster
	ArrivedMilli         int64 // GPU milli requested by arrived pods
	UsedMilli            int64 // GPU milli allocated at the end

	// Curve[p] is the GPU allocation ratio (percent of capacity) read off at
	// arrived load p percent, as the paper's analysis script computes it;
	// NaN where the run has no sample near p.
	Curve [MaxArrivalPct + 1]float64

	// Nodes is the final state of every node, in node-list order sorted by
	// name.
	Nodes []gpufit.Node
	// NodeNames matches Nodes.
	NodeNames []string
	// Arrivals is the arrival order (after shuffling and tuning) and
	// Placement[k] the index in Nodes of the node that took Arrivals[k], or
	// -1 when it did not fit anywhere.
	Arrivals  []Pod
	Placement []int
}

// AllocAt returns the allocation ratio at arrived load pct, or NaN.
func (r *Result) AllocAt(pct int) float64 {
	if pct < 0 || pct > MaxArrivalPct {
		return math.NaN()
	}
	return r.Curve[pct]
}

// NewScorer returns the scorer for a policy, built against the pod list's
// shape mix: FGD and Meridian get the reference's typical shapes (the most
// popular shapes covering popularity of the pods, 0 = DefaultPopularity),
// host memory included (FGD ignores it).
func NewScorer(policy string, pods []Pod, popularity float64) (gpufit.Scorer, error) {
	switch policy {
	case PolicyBestFit:
		return gpufit.BestFit(), nil
	case PolicyFGD:
		return gpufit.FGD(Target(pods, popularity)), nil
	case PolicyMeridian:
		return gpufit.Meridian(Target(pods, popularity)), nil
	case PolicyRandom:
		return randomScorer{}, nil
	}
	return nil, fmt.Errorf("openb: unknown policy %q (want one of %s)", policy, strings.Join(Policies(), ", "))
}

// FullTarget is the pod list's whole shape mix, one count per pod, with each
// pod's host memory.
func FullTarget(pods []Pod) gpufit.TargetWorkload {
	return gpufit.NewTargetWorkload(podShapes(pods))
}

func podShapes(pods []Pod) []gpufit.Shape {
	shapes := make([]gpufit.Shape, len(pods))
	for i, p := range pods {
		shapes[i] = gpufit.Shape{CPUMilli: p.Req.CPUMilli, GPUs: p.Req.GPUs, Milli: p.Req.Milli, Classes: p.Classes, MemMiB: p.Req.MemMiB, Weight: 1}
	}
	return shapes
}

// randomScorer rates every feasible node equally; the replay draws the node
// uniformly among the feasible ones, and the GPU of a fractional pod
// uniformly among the GPUs that fit, like the reference's Random policy.
type randomScorer struct{}

func (randomScorer) Name() string { return PolicyRandom }
func (randomScorer) Score(n *gpufit.Node, r *gpufit.Request, dst []int) (float64, []int) {
	_, g := gpufit.BestFit().Score(n, r, dst)
	return 0, g
}

// Target builds FGD's target workload from a pod list the way the reference
// simulator does: one count per pod (CPU-only pods included), the most popular
// shapes covering popularity of all pods.
func Target(pods []Pod, popularity float64) gpufit.TargetWorkload {
	if popularity <= 0 {
		popularity = DefaultPopularity
	}
	return gpufit.NewTargetWorkload(gpufit.TypicalShapes(podShapes(pods), popularity))
}

// Arrivals returns the pods in the order they arrive for a seed: sorted by
// name, shuffled with rand.New(rand.NewSource(seed)), then tuned to
// tune x capacity like the reference simulator (a random pod removed while
// the total GPU request exceeds the target; or pods drawn with replacement
// from the name-sorted list and appended while the next one still fits). It
// also returns the random source in the state the reference leaves it in.
func Arrivals(nodes []NodeSpec, pods []Pod, seed int64, tune float64) ([]Pod, *rand.Rand) {
	byName := slices.Clone(pods)
	sort.SliceStable(byName, func(i, j int) bool { return byName[i].Name < byName[j].Name })
	rng := rand.New(rand.NewSource(seed))
	_ = rng.Int() // the reference logs one draw right after seeding
	order := slices.Clone(byName)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })

	var podGPU, nodeGPU int64
	for _, p := range order {
		podGPU += p.Req.TotalMilli()
	}
	for _, n := range nodes {
		nodeGPU += int64(n.GPUs) * gpufit.MilliPerGPU
	}
	if tune > 0 && nodeGPU > 0 && len(byName) > 0 {
		target := tune * float64(nodeGPU)
		switch {
		case float64(podGPU) > target:
			for float64(podGPU) > target && len(order) > 0 {
				i := rng.Intn(len(order))
				podGPU -= order[i].Req.TotalMilli()
				order = slices.Delete(order, i, i+1)
			}
		case float64(podGPU) < target:
			for k := 0; ; k++ {
				p := byName[rng.Intn(len(byName))]
				// The reference compares the per-GPU share, not the total,
				// before appending; kept for comparability.
				if float64(podGPU+int64(p.Req.Milli)) > target {
					break
				}
				podGPU += p.Req.TotalMilli()
				p.Name = fmt.Sprintf("%s-tuned-%d", p.Name, k)
				order = append(order, p)
			}
		}
	}
	return order, rng
}

// ClusterOf returns, for each node of nodes, its federated cluster in
// [0, clusters): nodes are sorted by (model, name) and dealt round-robin, so
// every cluster gets a similar mix of GPU models.
func ClusterOf(nodes []NodeSpec, clusters int) []int {
	out := make([]int, len(nodes))
	if clusters <= 1 {
		return out
	}
	idx := make([]int, len(nodes))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		x, y := nodes[idx[a]], nodes[idx[b]]
		if x.Model != y.Model {
			return x.Model < y.Model
		}
		return x.Name < y.Name
	})
	for k, i := range idx {
		out[i] = k % clusters
	}
	return out
}

// cacheEntry memoises one (pod shape, node) evaluation; it is valid while the
// node's version is unchanged. Scorers are pure functions of the node state,
// so this only saves work.
type cacheEntry struct {
	ver   uint32
	fits  bool
	ngpu  uint8
	gpus  [maxCachedGPUs]uint8
	score float64
}

const maxCachedGPUs = 16

type shapeKey struct {
	req     gpufit.Request
	classes string
}

// Replay runs one seed of the experiment and returns its allocation curve.
// It is deterministic for a given (nodes, pods, cfg).
func Replay(ctx context.Context, nodes []NodeSpec, pods []Pod, cfg Config) (*Result, error) {
	if cfg.Clusters < 1 {
		cfg.Clusters = 1
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("openb: nodes: empty node list")
	}
	for _, n := range nodes {
		if n.GPUs > maxCachedGPUs {
			return nil, fmt.Errorf("openb: node %s: field gpu: %d GPUs exceeds the replay's limit of %d", n.Name, n.GPUs, maxCachedGPUs)
		}
	}
	scorer, err := NewScorer(cfg.Policy, pods, cfg.Popularity)
	if err != nil {
		return nil, err
	}
	if cfg.Policy == PolicyMeridian && (cfg.MeridianOptions != nil || cfg.MeridianFullMix) {
		opts := gpufit.DefaultMeridianOptions()
		if cfg.MeridianOptions != nil {
			opts = *cfg.MeridianOptions
		}
		target := Target(pods, cfg.Popularity)
		if cfg.MeridianFullMix {
			target = FullTarget(pods)
		}
		scorer = gpufit.MeridianWith(target, opts)
	}
	sorted := slices.Clone(nodes)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	arrivals, rng := Arrivals(sorted, pods, cfg.Seed, cfg.Tune)
	if cfg.ReferenceRNG {
		for range ReferenceInformerDraws {
			_ = rng.Float64()
		}
	}
	// The reference renames node i (sorted by name) to "%04d-<name>" with
	// rank[i] from one permutation, and its scheduler breaks score ties by the
	// smallest name: the tied node with the lowest rank wins.
	rank := rng.Perm(len(sorted))
	if cfg.MaxPods > 0 && len(arrivals) > cfg.MaxPods {
		arrivals = arrivals[:cfg.MaxPods]
	}

	state := make([]gpufit.Node, len(sorted))
	names := make([]string, len(sorted))
	ver := make([]uint32, len(sorted))
	var capMilli int64
	for i, n := range sorted {
		g := make([]gpufit.GPU, n.GPUs)
		for k := range g {
			g[k] = gpufit.GPU{FreeMilli: gpufit.MilliPerGPU}
		}
		state[i] = gpufit.Node{Class: n.Model, CPUMilliFree: n.CPUMilli, MemMiBFree: n.MemMiB, GPUs: g}
		names[i] = n.Name
		ver[i] = 1
		capMilli += int64(n.GPUs) * gpufit.MilliPerGPU
	}
	clusterOf := ClusterOf(sorted, cfg.Clusters)

	pipeline := cfg.Pipeline
	if pipeline == "" {
		pipeline = PipelineKernel
	}
	res := &Result{Policy: cfg.Policy, Pipeline: pipeline, Seed: cfg.Seed, Clusters: cfg.Clusters, Pods: len(arrivals), CapacityMilli: capMilli,
		Arrivals: arrivals, Placement: make([]int, len(arrivals))}
	samples := make([]sample, 0, len(arrivals)+1)
	samples = append(samples, sample{})

	var choose chooser
	switch cfg.Pipeline {
	case "", PipelineKernel:
		choose = newKernelChooser(cfg, scorer, state, ver, rank, clusterOf, rng)
	case PipelineDecide:
		if choose, err = newDecideChooser(cfg, pods, sorted, state, rank, clusterOf); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("openb: pipeline: unknown %q (want %s or %s)", cfg.Pipeline, PipelineKernel, PipelineDecide)
	}
	for k := range arrivals {
		if k%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("openb: replay canceled after %d pods: %w", k, err)
			}
		}
		if cfg.Progress != nil && k > 0 && k%1000 == 0 {
			cfg.Progress(k, len(arrivals))
		}
		p := &arrivals[k]
		r := &p.Req
		res.ArrivedMilli += r.TotalMilli()
		i, g := choose(k, p)
		if i < 0 {
			res.Placement[k] = -1
			res.Failed++
			samples = append(samples, sample{res.ArrivedMilli, res.UsedMilli})
			continue
		}
		state[i].Apply(r, g)
		ver[i]++
		res.Placement[k] = i
		res.Placed++
		res.UsedMilli += r.TotalMilli()
		samples = append(samples, sample{res.ArrivedMilli, res.UsedMilli})
	}
	if cfg.Progress != nil {
		cfg.Progress(len(arrivals), len(arrivals))
	}
	if cfg.ReferenceRNG {
		res.Curve = referenceCurve(samples[1:], capMilli)
	} else {
		res.Curve = curve(samples, capMilli)
	}
	res.Nodes = state
	res.NodeNames = names
	return res, nil
}

// chooser picks the node (an index into the replay's node state) and GPUs
// for arrival k, or -1 when the pod fits nowhere. The replay applies the
// choice; a chooser never changes the state itself.
type chooser func(k int, p *Pod) (int, []int)

// newKernelChooser scores every feasible node with the policy's gpufit
// scorer, as the reference simulator does: highest score, ties to the
// lowest seeded rank; with several clusters, first the cluster whose best
// node scores highest.
func newKernelChooser(cfg Config, scorer gpufit.Scorer, state []gpufit.Node, ver []uint32, rank []int, clusterOf []int, rng *rand.Rand) chooser {
	norm, _ := scorer.(gpufit.Normalizer)
	caches := map[shapeKey][]cacheEntry{}
	var (
		cand    []int
		scores  []float64
		gpusBuf = make([]int, 0, maxCachedGPUs)
		best    = make([]float64, cfg.Clusters)
		bestSet = make([]bool, cfg.Clusters)
		tied    []int
	)
	return func(k int, p *Pod) (int, []int) {
		r := &p.Req
		key := shapeKey{*r, strings.Join(p.Classes, "|")}
		cache, ok := caches[key]
		if !ok {
			cache = make([]cacheEntry, len(state))
			caches[key] = cache
		}
		cand, scores = cand[:0], scores[:0]
		for i := range state {
			e := &cache[i]
			if e.ver != ver[i] {
				n := &state[i]
				e.ver = ver[i]
				e.fits = classAllowed(p.Classes, n.Class, r) && gpufit.Fits(n, r)
				if e.fits {
					var g []int
					e.score, g = scorer.Score(n, r, gpusBuf[:0])
					e.ngpu = uint8(len(g))
					for j, x := range g {
						e.gpus[j] = uint8(x)
					}
				}
			}
			if e.fits {
				cand = append(cand, i)
				scores = append(scores, e.score)
			}
		}
		if len(cand) == 0 {
			return -1, nil
		}
		if cfg.Clusters > 1 {
			// Cluster choice: the cluster whose best node scores highest
			// (uniformly at random among tied clusters); then a node inside it.
			clear(bestSet)
			for j, i := range cand {
				c := clusterOf[i]
				if !bestSet[c] || scores[j] > best[c] {
					best[c], bestSet[c] = scores[j], true
				}
			}
			tied = tied[:0]
			var top float64
			for c := range best {
				if !bestSet[c] {
					continue
				}
				if len(tied) == 0 || best[c] > top {
					top, tied = best[c], append(tied[:0], c)
				} else if best[c] == top {
					tied = append(tied, c)
				}
			}
			chosen := tied[0]
			if len(tied) > 1 {
				chosen = tied[rng.Intn(len(tied))]
			}
			w := 0
			for j, i := range cand {
				if clusterOf[i] == chosen {
					cand[w], scores[w] = i, scores[j]
					w++
				}
			}
			cand, scores = cand[:w], scores[:w]
		}
		if norm != nil {
			norm.Normalize(scores)
		}
		// Highest score; ties go to the lowest rank (the reference's patched
		// selectHost picks the lexicographically smallest node name).
		sel := 0
		if cfg.Policy == PolicyRandom {
			// The reference's RandomScore gives one uniformly drawn
			// feasible node the top score.
			sel = rng.Intn(len(cand))
		}
		for j := 1; j < len(scores) && cfg.Policy != PolicyRandom; j++ {
			if scores[j] > scores[sel] || (scores[j] == scores[sel] && rank[cand[j]] < rank[cand[sel]]) {
				sel = j
			}
		}
		i := cand[sel]
		e := &cache[i]
		g := gpusBuf[:0]
		for j := 0; j < int(e.ngpu); j++ {
			g = append(g, int(e.gpus[j]))
		}
		if cfg.Policy == PolicyRandom && r.Shared() {
			g = randomGPU(&state[i], r, rng, g)
		}
		return i, g
	}
}

func classAllowed(classes []string, class string, r *gpufit.Request) bool {
	if r.GPUs == 0 || len(classes) == 0 {
		return true
	}
	return slices.Contains(classes, class)
}

// randomGPU draws uniformly among the GPUs that can serve a fractional pod,
// like the reference's random GPU selection.
func randomGPU(n *gpufit.Node, r *gpufit.Request, rng *rand.Rand, dst []int) []int {
	pick, cnt := -1, 0
	for i := range n.GPUs {
		if n.GPUs[i].FreeMilli >= r.Milli && n.GPUs[i].FreeMemMiB >= r.GPUMemMiB {
			cnt++
			if rng.Intn(cnt) == 0 {
				pick = i
			}
		}
	}
	return append(dst[:0], pick)
}

type sample struct{ arrived, used int64 }

// curve reproduces the paper's analysis script: every sample's arrived load
// is rounded half-to-even to a whole percent and its allocation ratio to two
// decimals; the value at p is the mean over samples at p, or over samples
// within p±1 when none is exactly at p, rounded to two decimals.
func curve(samples []sample, capMilli int64) [MaxArrivalPct + 1]float64 {
	var out [MaxArrivalPct + 1]float64
	var sum [MaxArrivalPct + 2]float64
	var cnt [MaxArrivalPct + 2]int
	capF := float64(capMilli)
	for _, s := range samples {
		a := math.RoundToEven(float64(s.arrived) / capF * 100)
		if a < 0 || a > MaxArrivalPct+1 {
			continue
		}
		v := math.Round(float64(s.used)/capF*100*100) / 100
		sum[int(a)] += v
		cnt[int(a)]++
	}
	for p := 0; p <= MaxArrivalPct; p++ {
		if cnt[p] > 0 {
			out[p] = math.Round(sum[p]/float64(cnt[p])*100) / 100
			continue
		}
		var s float64
		var c int
		for q := max(p-1, 0); q <= p+1; q++ {
			s += sum[q]
			c += cnt[q]
		}
		if c == 0 {
			out[p] = math.NaN()
		} else {
			out[p] = math.Round(s/float64(c)*100) / 100
		}
	}
	return out
}

// referenceCurve is curve computed the way the reference's analysis
// (scripts/analysis.py, then experiments/analysis/merge_alloc_discrete*.py)
// does, for seed-exact comparisons: one sample per scheduled pod and none
// before the first (its log has no row at zero arrivals); arrived and
// allocated ratios as arrived/total_gpus/10 and used/total_gpus/10 in float64;
// Python's round (of the binary float's exact value, ties to even) to a whole
// percent and to two decimals; the mean summed as numpy sums.
func referenceCurve(samples []sample, capMilli int64) [MaxArrivalPct + 1]float64 {
	var out [MaxArrivalPct + 1]float64
	var vals [MaxArrivalPct + 2][]float64
	gpus := float64(capMilli) / gpufit.MilliPerGPU
	for _, s := range samples {
		a := math.RoundToEven(float64(s.arrived) / gpus / 10)
		if a < 0 || a > MaxArrivalPct+1 {
			continue
		}
		vals[int(a)] = append(vals[int(a)], pyRound2(float64(s.used)/gpus/10))
	}
	for p := 0; p <= MaxArrivalPct; p++ {
		v := vals[p]
		if len(v) == 0 {
			for q := max(p-1, 0); q <= p+1; q++ {
				v = append(v[:len(v):len(v)], vals[q]...)
			}
		}
		if len(v) == 0 {
			out[p] = math.NaN()
			continue
		}
		out[p] = pyRound2(numpySum(v) / float64(len(v)))
	}
	return out
}

// numpySum adds like numpy's sum of a contiguous float64 array (what pandas'
// mean uses): pairwise, in 8-way unrolled blocks of up to 128 values.
func numpySum(v []float64) float64 {
	return pairwiseSum(v)
}

func pairwiseSum(a []float64) float64 {
	n := len(a)
	switch {
	case n < 8:
		var res float64
		for _, x := range a {
			res += x
		}
		return res
	case n <= 128:
		var r [8]float64
		copy(r[:], a[:8])
		i := 8
		for ; i < n-n%8; i += 8 {
			for j := range r {
				r[j] += a[i+j]
			}
		}
		res := ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
		for ; i < n; i++ {
			res += a[i]
		}
		return res
	default:
		n2 := n / 2
		n2 -= n2 % 8
		return pairwiseSum(a[:n2]) + pairwiseSum(a[n2:])
	}
}

// pyRound2 is Python's round(x, 2): the correctly rounded two-decimal value
// of x's exact binary value.
func pyRound2(x float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', 2, 64), 64)
	return v
}
