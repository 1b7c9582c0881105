package load

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// Config drives a Driver.
type Config struct {
	Mix Mix
	// Rate is the submits per second; Workers the submits in flight at
	// once (0: the rate, at least 64 and at most 1,000: a paused hub holds
	// a third of the submits for AttemptTimeout each).
	Rate    float64
	Workers int
	// Conns are gRPC connections to every hub, tried in turn: a submit
	// that fails on one (a dead or paused hub) goes to the next with the
	// same idempotency key, at most Attempts times (0: 3), each bounded by
	// AttemptTimeout (0: 2 s).
	Conns          []*grpc.ClientConn
	Attempts       int
	AttemptTimeout time.Duration
	// InFlight, when set, returns how many acknowledged workloads have
	// not finished; while it is above MaxInFlight the driver holds back
	// (and counts what it held back).
	InFlight    func() int
	MaxInFlight int
}

// Result is one submit.
type Result struct {
	Index int
	// Scheduled is when the submit was due; Done when it ended. Latency
	// is Done-Scheduled, queueing in the driver included.
	Scheduled, Done time.Time
	// ID is the workload id the hub acknowledged, empty on error.
	ID, Queue, Kind string
	Attempts        int
	Err             string
}

// Latency is the submit's latency from its scheduled time.
func (r Result) Latency() time.Duration { return r.Done.Sub(r.Scheduled) }

// Driver sends the load. Run it once.
type Driver struct {
	cfg Config

	next     atomic.Int64 // next workload index
	skipped  atomic.Int64 // due but dropped: every worker busy and the queue full
	held     atomic.Int64 // due but held back: too many in flight
	rr       atomic.Uint64
	mu       sync.Mutex
	results  []Result
	acked    atomic.Int64
	failures atomic.Int64
}

// New returns a driver; Run starts it.
func New(cfg Config) (*Driver, error) {
	if cfg.Rate <= 0 || len(cfg.Conns) == 0 || len(cfg.Mix.Queues) == 0 {
		return nil, errors.New("load: Rate, Conns and Mix.Queues are required")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = min(1000, max(64, int(cfg.Rate)))
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 3
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = 2 * time.Second
	}
	return &Driver{cfg: cfg}, nil
}

type job struct {
	i   int
	due time.Time
}

// Run sends submits at the configured rate until ctx ends, then waits for
// the submits under way.
func (d *Driver) Run(ctx context.Context) {
	jobs := make(chan job, max(1, int(d.cfg.Rate))) // one second of backlog at most
	var wg sync.WaitGroup
	for range d.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				d.submit(j)
			}
		}()
	}
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var due int64 // submits due so far (sent, skipped or held)
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case now := <-tick.C:
			want := int64(now.Sub(start).Seconds() * d.cfg.Rate)
			for ; due < want; due++ {
				at := start.Add(time.Duration(float64(due) / d.cfg.Rate * float64(time.Second)))
				if d.cfg.InFlight != nil && d.cfg.MaxInFlight > 0 && d.cfg.InFlight() > d.cfg.MaxInFlight {
					d.held.Add(1)
					continue
				}
				j := job{i: int(d.next.Add(1) - 1), due: at}
				select {
				case jobs <- j:
				default:
					d.skipped.Add(1)
				}
			}
		}
	}
	close(jobs)
	wg.Wait()
}

func (d *Driver) submit(j job) {
	spec := d.cfg.Mix.Workload(j.i)
	res := Result{Index: j.i, Scheduled: j.due, Queue: spec.Workload.GetQueue(), Kind: spec.Kind}
	start := int(d.rr.Add(1))
	var last error
	for a := 0; a < d.cfg.Attempts; a++ {
		res.Attempts = a + 1
		conn := d.cfg.Conns[(start+a)%len(d.cfg.Conns)]
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.AttemptTimeout)
		resp, err := meridianv1.NewWorkloadServiceClient(conn).SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: spec.Workload})
		cancel()
		if err == nil {
			res.ID = resp.GetWorkload().GetId()
			last = nil
			break
		}
		last = err
		if c := status.Code(err); c == codes.InvalidArgument || c == codes.PermissionDenied || c == codes.FailedPrecondition {
			break // the same answer from every hub
		}
	}
	res.Done = time.Now()
	if last != nil {
		res.Err = status.Code(last).String() + ": " + status.Convert(last).Message()
		d.failures.Add(1)
	} else {
		d.acked.Add(1)
	}
	d.mu.Lock()
	d.results = append(d.results, res)
	d.mu.Unlock()
}

// Stats are the driver's counters so far.
type Stats struct {
	Acked, Failed, Skipped, Held int64
}

// Stats returns the counters so far.
func (d *Driver) Stats() Stats {
	return Stats{Acked: d.acked.Load(), Failed: d.failures.Load(), Skipped: d.skipped.Load(), Held: d.held.Load()}
}

// Results returns every submit so far, by scheduled time.
func (d *Driver) Results() []Result {
	d.mu.Lock()
	out := append([]Result(nil), d.results...)
	d.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Scheduled.Before(out[j].Scheduled) })
	return out
}
