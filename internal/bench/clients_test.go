package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/gob"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meridian-gpu/meridian/connectors/simcluster"
	"github.com/meridian-gpu/meridian/internal/flowwindow"
	"github.com/meridian-gpu/meridian/internal/localrun"
	"github.com/meridian-gpu/meridian/internal/protofast"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// clientsEnv turns this test binary into the process that runs the
// benchmark's load (see startLoad) when MERIDIAN_BENCH_CLIENTS=process:
// the submitting clients and the watcher that sees each workload
// accepted. Clients of a dispatcher are other programs, usually on other
// machines, and inside the hub's process their garbage (a sixth of what
// the process allocated at 2,000 workloads/s) makes the hub's collector
// run more often. Measured, though, a third Go runtime on the same two
// cores cost more than that saved: at 2,000 workloads/s for 60 s, CPU per
// workload rose by 9% and p99 from 287 to 516 ms (docs/benchmarks.md). So
// the load runs in the benchmark's own process unless asked otherwise.
const clientsEnv = "MERIDIAN_BENCH_CLIENTS_PROCESS"

// clientsInProcess says whether the load runs in the benchmark's own
// process (the default, or MERIDIAN_BENCH_CLIENTS=inprocess) instead of a
// child (MERIDIAN_BENCH_CLIENTS=process).
func clientsInProcess(b *testing.B) bool {
	switch v := os.Getenv("MERIDIAN_BENCH_CLIENTS"); v {
	case "", "inprocess":
		return true
	case "process":
		return false
	default:
		b.Fatalf("MERIDIAN_BENCH_CLIENTS: %q is not inprocess or process", v)
		return false
	}
}

// loadSpec is the load to run: where the hub is, how to dial it, and what
// to submit. It goes to the clients' process as JSON in clientsEnv.
type loadSpec struct {
	Addr       string   `json:"addr"`
	CAFile     string   `json:"caFile,omitempty"` // PEM; empty: plaintext
	AdminToken string   `json:"adminToken,omitempty"`
	UserTokens []string `json:"userTokens,omitempty"`
	Users      int      `json:"users"`
	N          int      `json:"n"`
	Rate       int      `json:"rate"` // per second; 0: all at once
	Batch      int      `json:"batch"`
	Clients    int      `json:"clients"`
	Phases     []int32  `json:"phases,omitempty"`
	View       int32    `json:"view,omitempty"`       // the watch's WorkloadView
	SubmitView int32    `json:"submitView,omitempty"` // the submits' WorkloadView
	// StoreQueued sets the submits' store_queued: the API stores them at
	// once, QUEUED, without waiting for the loop's next cycle.
	StoreQueued bool   `json:"storeQueued,omitempty"`
	RunFor      string `json:"runFor"`
	// Accept: wait until every submitted workload is seen accepted (or
	// acceptWait passed) before reporting.
	Accept bool `json:"accept"`
}

// acceptWait bounds the wait for the last workloads to be accepted after
// the last submit.
const acceptWait = 3 * time.Minute

// loadResult is what a load run found.
type loadResult struct {
	SubmitDone time.Duration
	Failed     int64
	FailMsg    string
	// Behind counts workloads not seen accepted within acceptWait; their
	// Acc in the ledger is the deadline.
	Behind   int
	Ledger   *runLedger
	WatchLag []float64
}

// dial is how the load's clients connect: user u (or, for u < 0, the
// admin).
func (s loadSpec) dial(u int) ([]grpc.DialOption, error) {
	tc := grpc.WithTransportCredentials(insecure.NewCredentials())
	if s.CAFile != "" {
		raw, err := os.ReadFile(s.CAFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(raw) {
			return nil, fmt.Errorf("%s: no PEM certificate", s.CAFile)
		}
		tc = grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	}
	opts := append([]grpc.DialOption{tc, protofast.DialOption()}, flowwindow.DialOptions()...)
	switch {
	case u >= 0 && len(s.UserTokens) > 0:
		opts = append(opts, localrun.Bearer(s.UserTokens[u%len(s.UserTokens)]))
	case s.AdminToken != "":
		opts = append(opts, localrun.Bearer(s.AdminToken))
	}
	return opts, nil
}

// load is a connected load, ready to start.
type load struct {
	spec   loadSpec
	conns  []*grpc.ClientConn
	users  []meridianv1.WorkloadServiceClient
	stream meridianv1.WorkloadService_WatchWorkloadsClient

	mu       sync.Mutex
	led      *runLedger
	watchLag []float64
}

// connect dials the hub and opens the watch, before any submit.
func connect(ctx context.Context, spec loadSpec) (*load, error) {
	l := &load{spec: spec, led: newRunLedger(spec.N)}
	for u := -1; u < spec.Users; u++ {
		opts, err := spec.dial(u)
		if err != nil {
			l.close()
			return nil, err
		}
		c, err := grpc.NewClient(spec.Addr, opts...)
		if err != nil {
			l.close()
			return nil, err
		}
		l.conns = append(l.conns, c)
		if u >= 0 {
			l.users = append(l.users, meridianv1.NewWorkloadServiceClient(c))
		}
	}
	phases := make([]meridianv1.WorkloadPhase, len(spec.Phases))
	for i, p := range spec.Phases {
		phases[i] = meridianv1.WorkloadPhase(p)
	}
	var err error
	l.stream, err = meridianv1.NewWorkloadServiceClient(l.conns[0]).WatchWorkloads(ctx, &meridianv1.WatchWorkloadsRequest{Queue: "bench/load", Phase: phases,
		View: meridianv1.WorkloadView(spec.View)})
	if err != nil {
		l.close()
		return nil, err
	}
	go l.watch()
	return l, nil
}

func (l *load) close() {
	for _, c := range l.conns {
		_ = c.Close()
	}
}

// watch records the first time each workload is seen ACCEPTED (or later).
func (l *load) watch() {
	for {
		ev, err := l.stream.Recv()
		if err != nil {
			return
		}
		switch ev.GetWorkload().GetStatus().GetPhase() {
		case meridianv1.WorkloadPhase_WORKLOAD_PHASE_ACCEPTED, meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING, meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED:
			now := time.Now()
			l.mu.Lock()
			if l.led.seen(ev.GetWorkload().GetName(), now) {
				l.led.stages(ev.GetWorkload().GetName(), ev.GetWorkload().GetStatus())
				// How long the first accepted state took from the hub's
				// write (its update time, same clock) to this watcher.
				if ut := ev.GetWorkload().GetStatus().GetUpdateTime(); ut != nil {
					l.watchLag = append(l.watchLag, now.Sub(ut.AsTime()).Seconds()*1000)
				}
			}
			l.mu.Unlock()
		}
	}
}

// run submits the load from start on and, when the spec says so, waits
// for it to be accepted.
//
// The load is open loop: each submit has a scheduled send time, and
// latency counts from it, so a stall that holds the clients back counts
// in full (no coordinated omission). A failed submit is counted and the
// load goes on, as an open-loop generator must: a long run that stopped
// at its first error would report nothing of what led to it.
func (l *load) run(ctx context.Context, start time.Time) loadResult {
	s := l.spec
	var (
		wg        sync.WaitGroup
		failed    atomic.Int64
		firstFail sync.Once
		failMsg   string
		next      atomic.Int64
	)
	for c := 0; c < s.Clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wl := l.users[c%len(l.users)]
			for {
				j := int(next.Add(int64(s.Batch)) - int64(s.Batch))
				if j >= s.N {
					return
				}
				due := start // a burst is due at once
				if s.Rate > 0 {
					due = start.Add(time.Duration(j) * time.Second / time.Duration(s.Rate))
					if d := time.Until(due); d > 0 {
						time.Sleep(d)
					}
				}
				end := min(j+s.Batch, s.N)
				ws := make([]*meridianv1.Workload, 0, end-j)
				for k := j; k < end; k++ {
					ws = append(ws, &meridianv1.Workload{
						Name: workloadName(k), Queue: "bench/load", Preemptible: true,
						Labels: map[string]string{simcluster.LabelDuration: s.RunFor},
						PodSets: []*meridianv1.PodSet{{Name: "main", Replicas: 1, Resources: &meridianv1.Resources{
							GpuMilli: 1000, CpuMilli: 1000, MemoryMib: 1024, AcceleratorClass: "nvidia-h100-80gb"}}},
					})
				}
				t0 := time.Now()
				var err error
				if s.Batch == 1 {
					_, err = wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: ws[0], View: meridianv1.WorkloadView(s.SubmitView), StoreQueued: s.StoreQueued})
				} else {
					_, err = wl.SubmitWorkloads(ctx, &meridianv1.SubmitWorkloadsRequest{Workloads: ws, View: meridianv1.WorkloadView(s.SubmitView), StoreQueued: s.StoreQueued})
				}
				if err != nil {
					failed.Add(int64(len(ws)))
					firstFail.Do(func() { failMsg = fmt.Sprintf("%s into the run: %v", time.Since(start).Round(time.Millisecond), err) })
					continue
				}
				l.mu.Lock()
				for k := j; k < end; k++ {
					l.led.Sent[k], l.led.Due[k] = t0.UnixNano(), due.UnixNano()
				}
				l.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res := loadResult{SubmitDone: time.Since(start), Failed: failed.Load(), FailMsg: failMsg}
	if s.Accept {
		expect := s.N - int(res.Failed)
		allAccepted := func() bool {
			l.mu.Lock()
			defer l.mu.Unlock()
			return l.led.Accepted >= expect
		}
		for wait := time.Now().Add(acceptWait); !allAccepted() && time.Now().Before(wait) && ctx.Err() == nil; {
			time.Sleep(5 * time.Millisecond)
		}
		// A hub that fell behind still gets its figures reported: what
		// is not accepted by now counts as accepted at this deadline.
		if !allAccepted() {
			deadline := time.Now().UnixNano()
			l.mu.Lock()
			for j := range s.N {
				if l.led.Sent[j] != 0 && l.led.Acc[j] == 0 {
					l.led.Acc[j] = deadline
					res.Behind++
				}
			}
			l.mu.Unlock()
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	res.Ledger = l.led
	res.WatchLag = append([]float64(nil), l.watchLag...)
	return res
}

// runClientsProcess is the clients' process: it connects, says "ready",
// waits for "go <start, Unix nanoseconds>" on stdin, runs the load,
// writes its result (gob) on stdout and waits for stdin to close, so
// that the benchmark reads its CPU time while it is still there.
func runClientsProcess(raw string) int {
	var spec loadSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", clientsEnv, err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, err := connect(ctx, spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "clients:", err)
		return 1
	}
	defer l.close()
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "ready")
	if err := out.Flush(); err != nil {
		return 1
	}
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadString('\n')
	ns, perr := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(line), "go "), 10, 64)
	if err != nil || perr != nil {
		fmt.Fprintf(os.Stderr, "clients: want \"go <unix nanoseconds>\", got %q (%v)\n", line, err)
		return 1
	}
	res := l.run(ctx, time.Unix(0, ns))
	if err := gob.NewEncoder(out).Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, "clients:", err)
		return 1
	}
	if err := out.Flush(); err != nil {
		return 1
	}
	_, _ = io.Copy(io.Discard, in)
	return 0
}

// loadRunner runs a load, in a child process or in this one.
type loadRunner interface {
	// begin starts the load, scheduled from start.
	begin(start time.Time)
	// wait returns the load's result once it is done.
	wait(b *testing.B) loadResult
	// cpu is the CPU time the load's process used so far, when it is not
	// this process (0 otherwise).
	usage() procUsage
}

// startLoad connects the load's clients and watcher, in this process or
// (MERIDIAN_BENCH_CLIENTS=process) in one of their own.
func startLoad(b *testing.B, ctx context.Context, spec loadSpec) loadRunner {
	if clientsInProcess(b) {
		l, err := connect(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(l.close)
		return &inProcessLoad{ctx: ctx, l: l, done: make(chan loadResult, 1)}
	}
	raw, _ := json.Marshal(spec)
	child := startChild(b, "clients", clientsEnv, string(raw), true)
	return &clientsProcess{child: child}
}

type inProcessLoad struct {
	ctx  context.Context
	l    *load
	done chan loadResult
}

func (p *inProcessLoad) begin(start time.Time) {
	go func() { p.done <- p.l.run(p.ctx, start) }()
}
func (p *inProcessLoad) wait(*testing.B) loadResult { return <-p.done }
func (p *inProcessLoad) usage() procUsage           { return procUsage{} }

// clientsProcess is the running clients' process.
type clientsProcess struct{ child *childProcess }

func (p *clientsProcess) begin(start time.Time) {
	fmt.Fprintf(p.child.stdin, "go %d\n", start.UnixNano())
}

func (p *clientsProcess) wait(b *testing.B) loadResult {
	var res loadResult
	if err := gob.NewDecoder(p.child.out).Decode(&res); err != nil {
		b.Fatalf("the clients' process gave no result: %v", err)
	}
	return res
}

func (p *clientsProcess) usage() procUsage { return p.child.usage() }
