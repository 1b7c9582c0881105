package demo

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridian-gpu/meridian/connectors/simcluster"
	examplefiles "github.com/meridian-gpu/meridian/examples"
	"github.com/meridian-gpu/meridian/internal/cli"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// team is one leaf queue of the demo's tree.
type team struct {
	path   string
	weight int32
}

var teams = []team{{"acme/research", 3}, {"acme/product", 2}, {"acme/platform", 1}}

// classGPUs is the demo federation's capacity per accelerator class; the
// tenant's quotas in treeFile list the same numbers (a test checks).
var classGPUs = map[string]int64{
	"nvidia-h100-80gb":   64,
	"nvidia-a100-40gb":   24,
	"nvidia-l40s-48gb":   24,
	"nvidia-gb200-192gb": 8,
}

func teamList() string {
	var parts []string
	for _, t := range teams {
		parts = append(parts, fmt.Sprintf("%s (weight %d)", t.path, t.weight))
	}
	return strings.Join(parts, ", ")
}

// treeFile is the demo's queue tree, the file users apply (its comment
// explains the tree); teams must match its leaves and weights.
const treeFile = "queues/acme.yaml"

// demoQueues returns the queues of treeFile, with the tenant's quota
// topped up for any class of gpus the file does not list (a real spoke's
// GPUs in make demo-k8s), so the tenant owns the whole federation.
func demoQueues(gpus map[string]int64) ([]*meridianv1.Queue, error) {
	data, err := examplefiles.FS.ReadFile(treeFile)
	if err != nil {
		return nil, err
	}
	queues, err := cli.DecodeQueues(data)
	if err != nil {
		return nil, fmt.Errorf("examples/%s: %w", treeFile, err)
	}
	tenant := queues[0]
	listed := map[string]bool{}
	for _, q := range tenant.GetQuotas() {
		listed[q.GetAcceleratorClass()] = true
	}
	classes := make([]string, 0, len(gpus))
	for class := range gpus {
		classes = append(classes, class)
	}
	sort.Strings(classes)
	for _, class := range classes {
		if !listed[class] {
			tenant.Quotas = append(tenant.Quotas, &meridianv1.QueueQuota{AcceleratorClass: class, NominalMilliGpus: gpus[class] * 1000})
		}
	}
	return queues, nil
}

// createQueues creates the demo's tree (demoQueues). The tenant acme owns
// every GPU of the federation as its nominal quota; the teams own none
// and borrow from it, so fairshare alone (weights 3:2:1, Fair Tree over
// decayed usage) splits the contended GPUs, and priority preemption is
// the only preemption. docs/design/quota-and-fairshare.md explains
// borrowing and reclaim.
func createQueues(ctx context.Context, c client, gpus map[string]int64) error {
	queues, err := demoQueues(gpus)
	if err != nil {
		return err
	}
	for _, q := range queues {
		_, err := c.q.CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: q})
		if err != nil && status.Code(err) != codes.AlreadyExists {
			return fmt.Errorf("create queue %s: %w", q.Path, err)
		}
	}
	return nil
}

// addRuntimes gives every workload of the mix the template the real spoke
// needs to run it for its simulated duration (in real time at this time
// scale) and to end with its exit code; the simulated clusters keep using
// the labels.
func addRuntimes(mix []*item, real *Spoke, scale float64) error {
	for _, it := range mix {
		d, err := time.ParseDuration(it.w.Labels[simcluster.LabelDuration])
		if err != nil {
			return fmt.Errorf("workload %s: %s: %w", it.w.Name, simcluster.LabelDuration, err)
		}
		exit := 0
		if v, ok := it.w.Labels[simcluster.LabelExitCode]; ok {
			if exit, err = strconv.Atoi(v); err != nil {
				return fmt.Errorf("workload %s: %s: %w", it.w.Name, simcluster.LabelExitCode, err)
			}
		}
		it.w.Runtime = real.Runtime(time.Duration(float64(d)/scale), exit)
	}
	return nil
}

// item is one workload of the mix, with its kind for the summary.
type item struct {
	kind string
	w    *meridianv1.Workload
	id   string
}

// generate draws the demo's mixed workload: gangs on NVLink and racks,
// fractional and elastic jobs, single-node jobs of any class, three
// priorities (the urgent ones come last, to show preemption), and a few
// that fail with exit code 3.
func generate(n int, rng *rand.Rand) []*item {
	var out []*item
	for i := 0; i < n; i++ {
		t := teams[i%len(teams)]
		w := &meridianv1.Workload{
			Name:        fmt.Sprintf("demo-%03d", i),
			Queue:       t.path,
			Preemptible: true,
			Labels:      map[string]string{},
		}
		// Simulated run time, 1 to 4 minutes, log-uniform.
		dur := time.Duration(60*math.Pow(4, rng.Float64())) * time.Second
		w.Labels[simcluster.LabelDuration] = dur.Round(time.Second).String()
		kind := ""
		ps := func(name string, replicas, min, milli int32, class string, topo meridianv1.Topology) *meridianv1.PodSet {
			return &meridianv1.PodSet{Name: name, Replicas: replicas, MinReplicas: min, Topology: topo,
				Resources: &meridianv1.Resources{GpuMilli: milli, CpuMilli: 4000, MemoryMib: 16384, AcceleratorClass: class}}
		}
		switch x := rng.Intn(100); {
		case x < 12:
			kind = "gang 2x8 H100, one NVLink domain"
			w.PodSets = append(w.PodSets, ps("worker", 2, 0, 8000, "nvidia-h100-80gb", meridianv1.Topology_TOPOLOGY_NVLINK_DOMAIN))
		case x < 15:
			kind = "gang 4x8 H100"
			w.PodSets = append(w.PodSets, ps("worker", 4, 0, 8000, "nvidia-h100-80gb", meridianv1.Topology_TOPOLOGY_CLUSTER))
		case x < 35:
			kind = "fractional A100 (MPS)"
			p := ps("infer", int32(1+rng.Intn(3)), 0, int32(250*(1+rng.Intn(2))), "nvidia-a100-40gb", meridianv1.Topology_TOPOLOGY_CLUSTER)
			p.Resources.FractionalMode = meridianv1.FractionalMode_FRACTIONAL_MODE_MPS
			w.PodSets = append(w.PodSets, p)
		case x < 45:
			kind = "elastic 1-4 x A100"
			w.PodSets = append(w.PodSets, ps("trainer", 4, 1, 1000, "nvidia-a100-40gb", meridianv1.Topology_TOPOLOGY_CLUSTER))
		case x < 57:
			kind = "gang 2x4 L40S, one rack"
			w.PodSets = append(w.PodSets, ps("worker", 2, 0, 4000, "nvidia-l40s-48gb", meridianv1.Topology_TOPOLOGY_RACK))
		case x < 62:
			kind = "gang 2x4 GB200"
			w.PodSets = append(w.PodSets, ps("worker", 2, 0, 4000, "nvidia-gb200-192gb", meridianv1.Topology_TOPOLOGY_CLUSTER))
		default:
			g := []int32{1, 2, 4}[rng.Intn(3)]
			kind = fmt.Sprintf("%d GPU(s), any class", g)
			w.PodSets = append(w.PodSets, ps("main", 1, 0, g*1000, "", meridianv1.Topology_TOPOLOGY_CLUSTER))
		}
		switch x := rng.Intn(100); {
		case x < 10:
			w.Priority = 100
		case x < 25:
			w.Priority = 10
		}
		if rng.Intn(50) == 0 {
			w.Labels[simcluster.LabelExitCode] = "3"
			kind += " (fails)"
		}
		w.Labels["demo-kind"] = strings.NewReplacer(" ", "-", ",", "", "(", "", ")", "").Replace(kind)
		w.IdempotencyKey = fmt.Sprintf("demo-%d", i)
		out = append(out, &item{kind: kind, w: w})
	}
	// Urgent work arrives last, into a busy federation.
	sort.SliceStable(out, func(a, b int) bool { return out[a].w.Priority < 100 && out[b].w.Priority == 100 })
	return out
}

// submit sends the mix over gRPC: two thirds at once, the rest over a few
// seconds, as a burst and then a trickle would arrive.
func submit(ctx context.Context, c client, mix []*item, mon *monitor) error {
	burst := len(mix) * 2 / 3
	for i, it := range mix {
		if i >= burst {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(30 * time.Millisecond):
			}
		}
		resp, err := c.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: it.w})
		if err != nil {
			return fmt.Errorf("submit %s: %w", it.w.Name, err)
		}
		it.id = resp.GetWorkload().GetId()
		mon.submitted.Add(1)
	}
	return nil
}
