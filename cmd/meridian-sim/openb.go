package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
	"github.com/meridian-gpu/meridian/hub/sim/openb"
)

func init() {
	register(subcommand{
		name:    "openb",
		summary: "replay the Alibaba OpenB GPU trace (Weng et al., ATC'23) and report GPU allocation",
		run:     runOpenB,
	})
}

type openbJob struct {
	podList, pipeline, policy string
	pods                      []openb.Pod
	seed                      int64
	res                       *openb.Result
	err                       error
}

func runOpenB(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("openb", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodesFlag := fs.String("nodes", "", "node list CSV (default: the shared data dir's "+openb.NodesFile+")")
	podsFlag := fs.String("pods", "default", "comma list of pod-list CSV paths or variant names (default, cpu050, gpushare40, ...); LIST+cpuNNN, +shareNN or +specNN[@SEED] derives a stress variant (default+cpu200)")
	seedsFlag := fs.String("seeds", "42-51", "seeds: a range A-B and/or a comma list")
	policyFlag := fs.String("policy", openb.PolicyMeridian, "comma list of policies: "+strings.Join(openb.Policies(), ", "))
	clusters := fs.Int("clusters", 1, "number of federated clusters (nodes dealt round-robin by model, name)")
	tune := fs.Float64("tune", openb.DefaultTune, "total GPU request as a multiple of capacity")
	popularity := fs.Float64("popularity", openb.DefaultPopularity, "share of the pod list's pods covered by the typical shapes that FGD and Meridian score against when the target is the whole list (kernel pipeline; decide with fgd or --target whole), in (0, 1]")
	maxPods := fs.Int("max-pods", 0, "stop each run after this many arrivals (0 = all)")
	pipelineFlag := fs.String("pipeline", openb.PipelineKernel, "comma list: how each pod's node is chosen: kernel (score every feasible node with the gpufit kernel) and/or decide (the hub's scheduler.Decide, one cycle per pod)")
	target := fs.String("target", openb.TargetHistory, "decide pipeline, meridian policy: the shape mix scored against: history (decayed past arrivals, as the hub), whole (the whole pod list, look-ahead) or pending (the pod itself)")
	halfLife := fs.Int("history-half-life", openb.DefaultHistoryHalfLife, "decide pipeline, target history: half-life in arrivals")
	ablate := fs.String("ablate", "", "meridian policy, kernel pipeline: comma list of refinements to turn off, for ablations: memory (memory-aware hostability), pressure (class pressure), steer (CPU-only tie-break)")
	referenceRNG := fs.Bool("reference-rng", false, "replay the reference simulator's random stream draw for draw (its informers' draws before the node-rank permutation) and read curves off as its analysis scripts do: seed-exact against the published per-seed curves")
	fgdLearned := fs.Bool("fgd-learned", false, "decide pipeline, fgd policy: score against the target learned from past arrivals, as the hub's meridian policy does, instead of the whole pod list's typical shapes (look-ahead)")
	fullMix := fs.Bool("full-mix", false, "meridian policy, kernel pipeline: score against every shape of the pod list instead of FGD's typical shapes (an ablation: the old default)")
	jsonOut := fs.Bool("json", false, "print one JSON object as the last line of stdout")
	outPath := fs.String("out", "", "also write results to this file (.csv or .json)")
	parallel := fs.Int("parallel", runtime.GOMAXPROCS(0), "runs in parallel (bounded by GOMAXPROCS)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *clusters < 1 {
		return fmt.Errorf("--clusters: must be >= 1, got %d", *clusters)
	}
	if *maxPods < 0 {
		return fmt.Errorf("--max-pods: must be >= 0, got %d", *maxPods)
	}
	pipelines := splitList(*pipelineFlag)
	if len(pipelines) == 0 {
		return fmt.Errorf("--pipeline: empty")
	}
	for _, p := range pipelines {
		if p != openb.PipelineKernel && p != openb.PipelineDecide {
			return fmt.Errorf("--pipeline: want %s or %s, got %q", openb.PipelineKernel, openb.PipelineDecide, p)
		}
	}
	if *target != openb.TargetHistory && *target != openb.TargetWhole && *target != openb.TargetPending {
		return fmt.Errorf("--target: want %s, %s or %s, got %q", openb.TargetHistory, openb.TargetWhole, openb.TargetPending, *target)
	}
	if !(*popularity > 0 && *popularity <= 1) {
		return fmt.Errorf("--popularity: must be in (0, 1], got %g", *popularity)
	}
	if *halfLife < 1 {
		return fmt.Errorf("--history-half-life: must be >= 1 arrival, got %d", *halfLife)
	}
	opts, err := parseAblate(*ablate)
	if err != nil {
		return fmt.Errorf("--ablate: %w", err)
	}
	seeds, err := parseSeeds(*seedsFlag)
	if err != nil {
		return fmt.Errorf("--seeds: %w", err)
	}
	policies := splitList(*policyFlag)
	for _, p := range policies {
		if _, err := openb.NewScorer(p, nil, 0); err != nil {
			return fmt.Errorf("--policy: %w", err)
		}
	}
	if len(policies) == 0 {
		return fmt.Errorf("--policy: empty")
	}

	in, err := loadTrace(*nodesFlag, *podsFlag)
	if err != nil {
		return err
	}
	nodes, podLists, podsByList, published := in.nodes, in.lists, in.pods, in.published

	var jobs []*openbJob
	for _, pl := range podLists {
		for _, pipe := range pipelines {
			for _, pol := range policies {
				for _, s := range seeds {
					jobs = append(jobs, &openbJob{podList: pl, pipeline: pipe, policy: pol, pods: podsByList[pl], seed: s})
				}
			}
		}
	}
	start := time.Now()
	runParallel(jobs, *parallel, stderr, func(j *openbJob) string {
		cfg := openb.Config{Policy: j.policy, Seed: j.seed, Tune: *tune, Popularity: *popularity, Clusters: *clusters, MaxPods: *maxPods,
			Pipeline: j.pipeline, Target: *target, HistoryHalfLife: *halfLife, MeridianOptions: opts, MeridianFullMix: *fullMix, FGDLearned: *fgdLearned,
			ReferenceRNG: *referenceRNG}
		if j.res, j.err = openb.Replay(ctx, nodes, j.pods, cfg); j.err != nil {
			return ""
		}
		return fmt.Sprintf("%s %s/%s seed %d: placed %d/%d pods, alloc@100 %.2f%%", j.podList, j.pipeline, j.policy, j.seed, j.res.Placed, j.res.Pods, j.res.AllocAt(100))
	})
	for _, j := range jobs {
		if j.err != nil {
			return fmt.Errorf("%s %s seed %d: %w", j.podList, j.policy, j.seed, j.err)
		}
	}

	var sums []openb.Summary
	k := 0
	for _, pl := range podLists {
		for range pipelines {
			for _, pol := range policies {
				var rs []*openb.Result
				for range seeds {
					rs = append(rs, jobs[k].res)
					k++
				}
				s := openb.Summarize(pl, *tune, rs)
				if published != nil {
					if label := openb.PublishedLabel(pol); label != "" {
						m100, ok1 := published.Mean(pl, label, 100)
						m130, ok2 := published.Mean(pl, label, 130)
						if ok1 && ok2 {
							s.Published = map[string]openb.Pct{"100": openb.Pct(m100), "130": openb.Pct(m130)}
						}
					}
				}
				sums = append(sums, s)
			}
		}
	}
	elapsed := time.Since(start)
	printTable(stdout, sums, published)
	comps := comparisons(sums)
	printComparisons(stdout, comps)

	if *outPath != "" {
		if err := writeOut(*outPath, sums, elapsed); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	if *jsonOut {
		b, err := json.Marshal(jsonSummary(sums, elapsed))
		if err != nil {
			return fmt.Errorf("encode json: %w", err)
		}
		fmt.Fprintln(stdout, string(b))
	}
	return nil
}

func printTable(w io.Writer, sums []openb.Summary, published *openb.Published) {
	for _, s := range sums {
		fmt.Fprintf(w, "pod list %s, pipeline %s, policy %s, clusters %d, tune %.2f\n", s.PodList, s.Pipeline, s.Policy, s.Clusters, s.Tune)
		fmt.Fprintf(w, "%-6s %10s %10s %8s %8s", "seed", "alloc@100", "alloc@130", "placed", "failed")
		label := openb.PublishedLabel(s.Policy)
		if published != nil && label != "" {
			fmt.Fprintf(w, " %10s %10s", "paper@100", "paper@130")
		}
		fmt.Fprintln(w)
		for i, seed := range s.Seeds {
			fmt.Fprintf(w, "%-6d %10.2f %10.2f %8d %8d", seed, s.At100[i], s.At130[i], s.Placed[i], s.Failed[i])
			if published != nil && label != "" {
				if c, ok := published.Curve(s.PodList, label, seed); ok {
					fmt.Fprintf(w, " %10.2f %10.2f", c[100], c[130])
				}
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%-6s %10.2f %10.2f", "mean", s.Mean100, s.Mean130)
		if s.Published != nil {
			fmt.Fprintf(w, " %8s %8s %10.2f %10.2f", "", "", s.Published["100"], s.Published["130"])
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "%-6s %10.2f %10.2f\n\n", "stddev", s.Std100, s.Std130)
	}
}

// comparisons pairs the runs of each pod list seed by seed: within a
// pipeline, the first policy against every other one; within a policy,
// the decide pipeline against the kernel. Both at 100% and 130% arrived
// load.
func comparisons(sums []openb.Summary) []openb.Comparison {
	label := func(s openb.Summary) string { return s.Pipeline + "/" + s.Policy }
	var out []openb.Comparison
	add := func(a, b openb.Summary) {
		for _, at := range []int{100, 130} {
			out = append(out, openb.Compare(label(a), a, label(b), b, at))
		}
	}
	for i, a := range sums {
		for _, b := range sums[i+1:] {
			if a.PodList != b.PodList {
				continue
			}
			switch {
			case a.Pipeline == b.Pipeline && a.Policy != b.Policy && isFirstPolicy(sums, a):
				add(a, b)
			case a.Policy == b.Policy && a.Pipeline != b.Pipeline:
				if a.Pipeline == openb.PipelineDecide {
					add(a, b)
				} else {
					add(b, a)
				}
			}
		}
	}
	return out
}

// isFirstPolicy: s has the first policy asked for in its pod list and
// pipeline.
func isFirstPolicy(sums []openb.Summary, s openb.Summary) bool {
	for _, o := range sums {
		if o.PodList == s.PodList && o.Pipeline == s.Pipeline {
			return o.Policy == s.Policy
		}
	}
	return false
}

func printComparisons(w io.Writer, comps []openb.Comparison) {
	if len(comps) == 0 {
		return
	}
	fmt.Fprintln(w, "paired comparisons (same seeds; \"beats\" only where the 95% CI of the mean difference excludes zero):")
	for _, c := range comps {
		fmt.Fprintf(w, "  %s\n", c)
	}
	fmt.Fprintln(w)
}

type jsonComparison struct {
	A        string    `json:"a"`
	B        string    `json:"b"`
	At       int       `json:"arrived_pct"`
	Wins     int       `json:"wins"`
	Ties     int       `json:"ties"`
	Losses   int       `json:"losses"`
	MeanDiff openb.Pct `json:"mean_diff"`
	CILow    openb.Pct `json:"ci95_low"`
	CIHigh   openb.Pct `json:"ci95_high"`
	Verdict  string    `json:"verdict"`
}

type jsonRun struct {
	openb.Summary
	AllocAtArrival map[string]openb.Pct `json:"alloc_pct_at_arrival"`
}

func toJSONRun(s openb.Summary) jsonRun {
	return jsonRun{Summary: s, AllocAtArrival: map[string]openb.Pct{"100": s.Mean100, "130": s.Mean130}}
}

// jsonSummary is the object printed with --json: the first run's summary at
// the top level (policy, seeds, clusters, alloc_pct_at_arrival, ...) and every
// run under "runs" when several pod lists or policies were asked for.
func jsonSummary(sums []openb.Summary, elapsed time.Duration) map[string]any {
	var comps []jsonComparison
	for _, c := range comparisons(sums) {
		comps = append(comps, jsonComparison{c.A, c.B, c.At, c.Wins, c.Ties, c.Losses, openb.Pct(c.MeanDiff), openb.Pct(c.CILow), openb.Pct(c.CIHigh), c.Verdict()})
	}
	out := map[string]any{}
	first := toJSONRun(sums[0])
	b, _ := json.Marshal(first)
	_ = json.Unmarshal(b, &out)
	runs := make([]jsonRun, len(sums))
	for i, s := range sums {
		runs[i] = toJSONRun(s)
	}
	out["runs"] = runs
	if len(comps) > 0 {
		out["comparisons"] = comps
	}
	out["runtime_s"] = math.Round(elapsed.Seconds()*100) / 100
	return out
}

func writeOut(path string, sums []openb.Summary, elapsed time.Duration) error {
	var b strings.Builder
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		enc, err := json.MarshalIndent(jsonSummary(sums, elapsed), "", "  ")
		if err != nil {
			return err
		}
		b.Write(enc)
		b.WriteByte('\n')
	case ".csv":
		b.WriteString("pod_list,pipeline,policy,clusters,tune,seed,alloc_pct_at_100,alloc_pct_at_130,placed,failed\n")
		for _, s := range sums {
			for i, seed := range s.Seeds {
				fmt.Fprintf(&b, "%s,%s,%s,%d,%g,%d,%.2f,%.2f,%d,%d\n", s.PodList, s.Pipeline, s.Policy, s.Clusters, s.Tune, seed, s.At100[i], s.At130[i], s.Placed[i], s.Failed[i])
			}
		}
	default:
		return fmt.Errorf("%s: want a .csv or .json file", path)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// parseAblate turns --ablate's list into Meridian options, nil when
// nothing is turned off.
func parseAblate(s string) (*gpufit.MeridianOptions, error) {
	names := splitList(s)
	if len(names) == 0 {
		return nil, nil
	}
	o := gpufit.DefaultMeridianOptions()
	for _, n := range names {
		switch n {
		case "memory":
			o.MemoryAware = false
		case "pressure":
			o.ClassPressure = 0
		case "steer":
			o.SteerCPUOnly = false
		default:
			return nil, fmt.Errorf("unknown refinement %q (want memory, pressure or steer)", n)
		}
	}
	return &o, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// parseSeeds accepts "42-51", "42,43,50" or a mix ("42-44,50").
func parseSeeds(s string) ([]int64, error) {
	var out []int64
	for _, part := range splitList(s) {
		if a, b, ok := strings.Cut(part, "-"); ok && a != "" {
			lo, err1 := strconv.ParseInt(a, 10, 64)
			hi, err2 := strconv.ParseInt(b, 10, 64)
			if err1 != nil || err2 != nil || hi < lo || hi-lo > 10000 {
				return nil, fmt.Errorf("bad range %q (want A-B with A <= B)", part)
			}
			for v := lo; v <= hi; v++ {
				out = append(out, v)
			}
			continue
		}
		v, err := strconv.ParseInt(part, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad seed %q", part)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no seeds in %q", s)
	}
	return out, nil
}
