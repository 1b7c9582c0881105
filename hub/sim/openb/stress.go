package openb

import (
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Stress variants: pod lists of our own, derived from a published one, to
// check that a policy tuned on the nine published lists holds on mixes it
// never saw. Each names one direction the published variants take, pushed
// further (the reviewers of the trace hold back lists of the same kinds):
//
//	cpuNNN    CPU-only pods resampled (with replacement, from the list's own
//	          CPU-only pods) until their CPU totals NNN% of the list's
//	          CPU-only CPU: cpu150 has half as much again as the list.
//	shareNN   NN% of the whole single-GPU pods become fractional, their
//	          share drawn from the list's own fractional pods.
//	specNN    NN% of the GPU pods get a model constraint, drawn from the
//	          models the nodes have, weighted by GPUs (one model, or two of
//	          the same generation such as V100M16|V100M32).
//
// A variant is written "<list>+<variant>@<seed>" (default+cpu200@7); the
// seed (default 1) draws the changes, independently of the replay's seed.

// StressKinds lists the variant kinds.
func StressKinds() []string { return []string{"cpu", "share", "spec"} }

// ParseStress splits "default+cpu200@7" into the base list, the kind, the
// level and the seed. A name without "+" is not a variant (ok false).
func ParseStress(name string) (base, kind string, level int, seed int64, ok bool, err error) {
	base, v, found := strings.Cut(name, "+")
	if !found {
		return name, "", 0, 0, false, nil
	}
	seed = 1
	if v0, s, has := strings.Cut(v, "@"); has {
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			return "", "", 0, 0, false, fmt.Errorf("stress variant %q: seed %q is not a number", name, s)
		}
		v = v0
	}
	for _, k := range StressKinds() {
		if rest, has := strings.CutPrefix(v, k); has {
			if level, err = strconv.Atoi(rest); err != nil || level <= 0 || level > 1000 {
				return "", "", 0, 0, false, fmt.Errorf("stress variant %q: level %q: want 1..1000", name, rest)
			}
			if k != "cpu" && level > 100 {
				return "", "", 0, 0, false, fmt.Errorf("stress variant %q: level %d: a share of pods, want 1..100", name, level)
			}
			return base, k, level, seed, true, nil
		}
	}
	return "", "", 0, 0, false, fmt.Errorf("stress variant %q: kind: want one of %s followed by a level (cpu200, share60, spec40)", name, strings.Join(StressKinds(), ", "))
}

// Stress derives a variant of pods (see the file comment). It never
// changes pods, and is deterministic for a seed.
func Stress(pods []Pod, nodes []NodeSpec, kind string, level int, seed int64) ([]Pod, error) {
	rng := rand.New(rand.NewSource(seed))
	out := slices.Clone(pods)
	for i := range out {
		out[i].Classes = slices.Clone(out[i].Classes)
	}
	switch kind {
	case "cpu":
		var cpuOnly []Pod
		var cpu int64
		for _, p := range pods {
			if p.Req.GPUs == 0 {
				cpuOnly = append(cpuOnly, p)
				cpu += p.Req.CPUMilli
			}
		}
		if len(cpuOnly) == 0 {
			return nil, fmt.Errorf("openb: stress cpu%d: the list has no CPU-only pod to resample", level)
		}
		want := cpu * int64(level) / 100
		if want < cpu {
			// Fewer: keep a random subset.
			rng.Shuffle(len(cpuOnly), func(i, j int) { cpuOnly[i], cpuOnly[j] = cpuOnly[j], cpuOnly[i] })
			keep := map[string]bool{}
			var got int64
			for _, p := range cpuOnly {
				if got+p.Req.CPUMilli > want {
					continue
				}
				keep[p.Name], got = true, got+p.Req.CPUMilli
			}
			out = slices.DeleteFunc(out, func(p Pod) bool { return p.Req.GPUs == 0 && !keep[p.Name] })
			return out, nil
		}
		for k := 0; cpu < want; k++ {
			p := cpuOnly[rng.Intn(len(cpuOnly))]
			p.Name = fmt.Sprintf("%s-stress-%d", p.Name, k)
			out = append(out, p)
			cpu += p.Req.CPUMilli
		}
	case "share":
		var shares []int32
		for _, p := range pods {
			if p.Req.Shared() {
				shares = append(shares, p.Req.Milli)
			}
		}
		if len(shares) == 0 {
			return nil, fmt.Errorf("openb: stress share%d: the list has no fractional pod to draw shares from", level)
		}
		for i := range out {
			r := &out[i].Req
			if r.GPUs == 1 && r.Milli == 1000 && rng.Intn(100) < level {
				r.Milli = shares[rng.Intn(len(shares))]
			}
		}
	case "spec":
		gpus, most := map[string]int{}, map[string]int{}
		for _, n := range nodes {
			if n.Model != "" {
				gpus[n.Model] += n.GPUs
				most[n.Model] = max(most[n.Model], n.GPUs)
			}
		}
		models := make([]string, 0, len(gpus))
		total := 0
		for m, g := range gpus {
			models = append(models, m)
			total += g
		}
		sort.Strings(models)
		if total == 0 {
			return nil, fmt.Errorf("openb: stress spec%d: the node list has no GPU model", level)
		}
		draw := func() string {
			x := rng.Intn(total)
			for _, m := range models {
				if x < gpus[m] {
					return m
				}
				x -= gpus[m]
			}
			return models[len(models)-1]
		}
		for i := range out {
			p := &out[i]
			if p.Req.GPUs == 0 || rng.Intn(100) >= level {
				continue
			}
			m := draw()
			for try := 0; try < 8 && most[m] < int(p.Req.GPUs); try++ {
				m = draw() // a model whose nodes can hold the pod
			}
			if most[m] < int(p.Req.GPUs) {
				continue
			}
			p.Classes = []string{m}
			if sib := sibling(m, models); sib != "" && rng.Intn(2) == 0 {
				p.Classes = []string{m, sib}
				sort.Strings(p.Classes)
			}
		}
	default:
		return nil, fmt.Errorf("openb: stress kind %q: want one of %s", kind, strings.Join(StressKinds(), ", "))
	}
	return out, nil
}

// sibling is another model of the same family (V100M16 for V100M32), or "".
func sibling(m string, models []string) string {
	fam := strings.TrimRight(m, "0123456789")
	if i := strings.IndexAny(m, "M"); i > 0 {
		fam = m[:i]
	}
	for _, o := range models {
		if o != m && strings.HasPrefix(o, fam) && len(fam) > 1 {
			return o
		}
	}
	return ""
}
