package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/meridian-gpu/meridian/hub/sim/openb"
)

func init() {
	register(subcommand{
		name:    "openb-bound",
		summary: "bound the GPU allocation any policy could reach on the OpenB trace (LP upper bound, offline packing)",
		run:     runOpenBBound,
	})
}

type boundJob struct {
	podList string
	pods    []openb.Pod
	seed    int64
	lim     *openb.Limit
	err     error
}

// boundRow is one pod list's summary: per-seed limits and their means.
type boundRow struct {
	PodList     string         `json:"pod_list"`
	Seeds       []*openb.Limit `json:"seeds"`
	MeanArrived openb.Pct      `json:"mean_arrived_pct"`
	MeanBound   openb.Pct      `json:"mean_bound_pct"`
	MeanPacked  openb.Pct      `json:"mean_packed_pct"`
	PaperFGD    *openb.Pct     `json:"paper_fgd_pct,omitempty"`
	PaperBest   *openb.Pct     `json:"paper_bestfit_pct,omitempty"`
}

func runOpenBBound(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("openb-bound", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodesFlag := fs.String("nodes", "", "node list CSV (default: the shared data dir's "+openb.NodesFile+")")
	podsFlag := fs.String("pods", "default", "comma list of pod-list CSV paths, variant names (default, cpu050, gpushare40, ...) or stress variants (default+cpu200)")
	seedsFlag := fs.String("seeds", "42-51", "seeds: a range A-B and/or a comma list")
	tune := fs.Float64("tune", openb.DefaultTune, "total GPU request as a multiple of capacity (as the replay)")
	pct := fs.Int("at", 100, "arrived load in percent at which to bound the allocation")
	jsonOut := fs.Bool("json", false, "print one JSON object as the last line of stdout")
	parallel := fs.Int("parallel", runtime.GOMAXPROCS(0), "seeds in parallel (bounded by GOMAXPROCS)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *pct < 1 || *pct > openb.MaxArrivalPct {
		return fmt.Errorf("--at: must be in 1..%d, got %d", openb.MaxArrivalPct, *pct)
	}
	seeds, err := parseSeeds(*seedsFlag)
	if err != nil {
		return fmt.Errorf("--seeds: %w", err)
	}
	in, err := loadTrace(*nodesFlag, *podsFlag)
	if err != nil {
		return err
	}
	nodes, lists, published := in.nodes, in.lists, in.published
	var jobs []*boundJob
	for _, name := range lists {
		for _, s := range seeds {
			jobs = append(jobs, &boundJob{podList: name, pods: in.pods[name], seed: s})
		}
	}
	if len(jobs) == 0 {
		return fmt.Errorf("--pods: empty")
	}
	start := time.Now()
	runParallel(jobs, *parallel, stderr, func(j *boundJob) string {
		if j.lim, j.err = openb.ComputeLimit(ctx, nodes, j.pods, openb.LimitConfig{Seed: j.seed, Tune: *tune, Pct: *pct}); j.err != nil {
			return ""
		}
		return fmt.Sprintf("%s seed %d: arrived %.2f%%, bound %.2f%%, packed %.2f%% (%s)", j.podList, j.seed, j.lim.ArrivedPct(), j.lim.BoundPct(), j.lim.PackedPct(), j.lim.PackedBy)
	})
	for _, j := range jobs {
		if j.err != nil {
			return fmt.Errorf("%s seed %d: %w", j.podList, j.seed, j.err)
		}
	}

	var rows []boundRow
	for _, l := range lists {
		row := boundRow{PodList: l}
		var a, b, p float64
		for _, j := range jobs {
			if j.podList == l {
				row.Seeds = append(row.Seeds, j.lim)
				a, b, p = a+j.lim.ArrivedPct(), b+j.lim.BoundPct(), p+j.lim.PackedPct()
			}
		}
		n := float64(len(row.Seeds))
		row.MeanArrived, row.MeanBound, row.MeanPacked = openb.Pct(a/n), openb.Pct(b/n), openb.Pct(p/n)
		if published != nil {
			if m, ok := published.Mean(l, openb.PublishedLabel(openb.PolicyFGD), *pct); ok {
				v := openb.Pct(m)
				row.PaperFGD = &v
			}
			if m, ok := published.Mean(l, openb.PublishedLabel(openb.PolicyBestFit), *pct); ok {
				v := openb.Pct(m)
				row.PaperBest = &v
			}
		}
		rows = append(rows, row)
	}
	printBoundTable(stdout, rows, *pct)
	if *jsonOut {
		b, err := json.Marshal(map[string]any{"arrived_pct": *pct, "tune": *tune, "runs": rows,
			"runtime_s": float64(time.Since(start).Milliseconds()) / 1000})
		if err != nil {
			return fmt.Errorf("encode json: %w", err)
		}
		fmt.Fprintln(stdout, string(b))
	}
	return nil
}

func printBoundTable(w io.Writer, rows []boundRow, pct int) {
	fmt.Fprintf(w, "GPU allocation limit at %d%% arrived load (percent of capacity; bound: provable upper bound for any policy; packed: best offline packing found)\n", pct)
	fmt.Fprintf(w, "%-12s %6s %8s %8s %8s %8s %-s\n", "pod list", "seed", "pods", "arrived", "bound", "packed", "packed by")
	for _, r := range rows {
		for _, l := range r.Seeds {
			fmt.Fprintf(w, "%-12s %6d %8d %8.2f %8.2f %8.2f %s\n", r.PodList, l.Seed, l.Pods, l.ArrivedPct(), l.BoundPct(), l.PackedPct(), l.PackedBy)
		}
		fmt.Fprintf(w, "%-12s %6s %8s %8.2f %8.2f %8.2f", r.PodList, "mean", "", float64(r.MeanArrived), float64(r.MeanBound), float64(r.MeanPacked))
		if r.PaperFGD != nil && r.PaperBest != nil {
			fmt.Fprintf(w, " (paper: FGD %.2f, BestFit %.2f)", float64(*r.PaperFGD), float64(*r.PaperBest))
		}
		fmt.Fprintln(w)
	}
}
