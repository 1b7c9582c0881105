package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/hub/sim"
)

func init() {
	register(subcommand{
		name:    "contention",
		summary: "multi-team contention: 3 clusters, 4 teams of weights 1-4; shares, delays, utilization, preemptions",
		run:     runContention,
	})
	register(subcommand{
		name:    "run",
		summary: "run a scenario file (YAML or JSON: clusters, queues, jobs and job generators)",
		run:     runScenarioFile,
	})
}

func runContention(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("contention", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seed := fs.Int64("seed", 42, "random seed of the job generator")
	hours := fs.Float64("hours", 48, "simulated hours (the first quarter is warm-up)")
	out := common(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *hours <= 0 || *hours > 24*365 {
		return fmt.Errorf("--hours: must be in (0, 8760], got %g", *hours)
	}
	return simulate(ctx, sim.Contention(*seed, *hours), out, stdout, stderr)
}

func runScenarioFile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "", "scenario file (YAML or JSON); required")
	seed := fs.Int64("seed", -1, "override the scenario's seed")
	out := common(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *file == "" {
		return fmt.Errorf("-f: a scenario file is required (see examples/sim/)")
	}
	data, err := os.ReadFile(*file)
	if err != nil {
		return err
	}
	sc, err := sim.ParseScenario(data)
	if err != nil {
		return fmt.Errorf("%s: %w", *file, err)
	}
	if *seed >= 0 {
		sc.Seed = *seed
	}
	return simulate(ctx, sc, out, stdout, stderr)
}

type outputFlags struct {
	json    *bool
	out     *string
	policy  *string
	nominal *bool
}

func common(fs *flag.FlagSet) outputFlags {
	return outputFlags{
		json:    fs.Bool("json", false, "print the result as one JSON object on the last line of stdout"),
		out:     fs.String("out", "", "also write the result to this file (.json or .csv)"),
		policy:  fs.String("policy", "meridian", "node scorer: meridian (the core's default) or bestfit"),
		nominal: fs.Bool("nominal-first", false, "admit work within nominal quota before borrowing work (Kueue's order)"),
	}
}

func simulate(ctx context.Context, sc *sim.Scenario, o outputFlags, stdout, stderr io.Writer) error {
	cfg := scheduler.DefaultConfig()
	switch *o.policy {
	case scheduler.PolicyMeridian, scheduler.PolicyBestFit:
		cfg.Policy = *o.policy
	default:
		return fmt.Errorf("--policy: want meridian or bestfit, got %q", *o.policy)
	}
	cfg.NominalFirst = *o.nominal
	eng, err := sim.New(sc, cfg)
	if err != nil {
		return err
	}
	start := time.Now()
	res := eng.Run(func(now, end time.Duration) {
		fmt.Fprintf(stderr, "\r%s: simulated %s of %s (%.0f%%), %s elapsed   ", sc.Name, now.Round(time.Minute), end, 100*float64(now)/float64(end), time.Since(start).Round(100*time.Millisecond))
	})
	fmt.Fprintf(stderr, "\r%s: done in %s%40s\n", sc.Name, time.Since(start).Round(10*time.Millisecond), "")
	if err := ctx.Err(); err != nil {
		return err
	}
	res.WriteTable(stdout)
	if *o.out != "" {
		if err := writeResult(*o.out, res); err != nil {
			return err
		}
	}
	if *o.json {
		b, _ := json.Marshal(res)
		fmt.Fprintln(stdout, string(b))
	}
	return nil
}

func writeResult(path string, res *sim.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	switch strings.ToLower(filepath.Ext(path)) {
	case ".csv":
		return res.WriteCSV(f)
	case ".json":
		enc := json.NewEncoder(f)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	return fmt.Errorf("--out: %s: want a .json or .csv file", path)
}
