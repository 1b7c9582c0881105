package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/connectors/simcluster"
	"github.com/meridian-gpu/meridian/internal/demo"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// agentsEnv turns this test binary into the process that runs the
// benchmark's spoke agents (see startAgents). In a deployment each agent
// runs in its own cluster, not inside the hub: in a separate process they
// still share the machine's two cores, but not the hub's heap, so the
// hub's garbage collector walks only what the hub holds.
const agentsEnv = "MERIDIAN_BENCH_AGENTS_PROCESS"

func TestMain(m *testing.M) {
	if spec := os.Getenv(agentsEnv); spec != "" {
		os.Exit(runAgentsProcess(spec))
	}
	if spec := os.Getenv(clientsEnv); spec != "" {
		os.Exit(runClientsProcess(spec))
	}
	os.Exit(m.Run())
}

// agentsSpec is what the agents' process is told, as JSON in agentsEnv.
type agentsSpec struct {
	NATSURL  string `json:"natsURL"`
	Clusters int    `json:"clusters"`
	Nodes    int    `json:"nodes"`
	// TraceTo, when set, is the OTLP gRPC endpoint the agents trace to,
	// sampling as the hub does at TraceRatio (MERIDIAN_BENCH_TRACE).
	TraceTo    string  `json:"traceTo,omitempty"`
	TraceRatio float64 `json:"traceRatio,omitempty"`
}

// runAgentsProcess starts the agents, says "ready" on stdout, and runs
// until stdin closes (the benchmark ended, or died) or SIGTERM.
func runAgentsProcess(raw string) int {
	var spec agentsSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", agentsEnv, err)
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	// MERIDIAN_BENCH_AGENTS_CPUPROFILE=FILE profiles this process (the
	// benchmark's -test.cpuprofile covers the hub's process only).
	if path := os.Getenv("MERIDIAN_BENCH_AGENTS_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	var busOpts []natsbus.Option
	if spec.TraceTo != "" {
		tr, err := setupTracing("meridian-agent", traceEnvFor(spec.TraceTo, spec.TraceRatio))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer tr.Close(nil)
		busOpts = append(busOpts, natsbus.WithTracerProvider(tr.TracerProvider()))
	}
	var stops []func()
	for c := 0; c < spec.Clusters; c++ {
		sim, err := benchCluster(fmt.Sprintf("bench-%02d", c), spec.Nodes)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		stop, err := demo.StartAgent(ctx, spec.NATSURL, fmt.Sprintf("bench-%02d", c), sim, slog.New(slog.DiscardHandler), busOpts...)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		stops = append(stops, func() { stop(); sim.Close() })
	}
	fmt.Println("ready")
	<-ctx.Done()
	// MERIDIAN_BENCH_AGENTS_HEAPPROFILE=FILE writes this process's heap
	// profile as the benchmark ends (MERIDIAN_BENCH_HEAPPROFILE is the
	// hub's).
	if path := os.Getenv("MERIDIAN_BENCH_AGENTS_HEAPPROFILE"); path != "" {
		if err := writeHeapProfile(path); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	for _, stop := range stops {
		stop()
	}
	return 0
}

// benchCluster is one simulated cluster of nodes 8-GPU H100 nodes.
func benchCluster(id string, nodes int) (*simcluster.Cluster, error) {
	cfg, err := simcluster.ParseConfig([]byte(fmt.Sprintf(`labels: {bench: "yes"}
defaultDuration: 1h
nodes:
  - name: %s-h100
    count: %d
    gpus: 8
    acceleratorClass: nvidia-h100-80gb
    gpuMemoryMiB: 81920
    cpuMilli: 192000
    memoryMiB: 2097152
`, id, nodes)))
	if err != nil {
		return nil, err
	}
	return simcluster.New(cfg, simcluster.Options{})
}

// childProcess is a process this test binary started to play a part of
// the benchmark (the agents, the clients).
type childProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	// out is the child's stdout after its "ready" line, when kept.
	out *bufio.Reader
}

// startAgents runs s.Clusters agents, each on its own simulated cluster of
// s.Nodes nodes, in a child process connected to s.NATSURL, and stops it
// when the benchmark ends.
func startAgents(b *testing.B, s agentsSpec) *childProcess {
	spec, _ := json.Marshal(s)
	return startChild(b, "agents", agentsEnv, string(spec), false)
}

// startChild runs this test binary again with env set to spec, waits
// until it says "ready" on stdout, and closes its stdin (its cue to stop)
// when the benchmark ends. keepOut keeps the rest of its stdout for the
// caller; otherwise it is drained.
func startChild(b *testing.B, what, env, spec string, keepOut bool) *childProcess {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+spec)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start the %s' process: %v", what, err)
	}
	b.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	out := bufio.NewReaderSize(stdout, 1<<20)
	ready := make(chan error, 1)
	go func() {
		for {
			line, err := out.ReadString('\n')
			if strings.TrimSpace(line) == "ready" {
				ready <- nil
				if !keepOut {
					_, _ = io.Copy(io.Discard, out)
				}
				return
			}
			if err != nil {
				ready <- fmt.Errorf("the %s' process ended before it was ready: %v", what, err)
				return
			}
		}
	}()
	select {
	case err := <-ready:
		if err != nil {
			b.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		b.Fatalf("the %s' process was not ready within 60s", what)
	}
	return &childProcess{cmd: cmd, stdin: stdin, out: out}
}

// usage is the CPU time and page faults the child has used so far (Linux
// /proc; zero where it cannot be read).
func (p *childProcess) usage() procUsage {
	if p == nil {
		return procUsage{}
	}
	return readProcUsage(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
}
