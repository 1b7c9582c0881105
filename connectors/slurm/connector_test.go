package slurm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// fakeBackend is an in-memory job list for unit tests of the connector's
// bookkeeping (the real daemons are exercised in integration_test.go).
type fakeBackend struct {
	mu      sync.Mutex
	m       map[int64]*JobInfo
	nextID  int64
	submits int
	lists   int
	listErr error
	// listDelay makes each listing take this long, so concurrent callers
	// overlap.
	listDelay time.Duration
	// lostAnswer makes submit create the job and then fail, as when
	// slurmrestd's answer is lost.
	lostAnswer error
}

func newFakeBackend() *fakeBackend { return &fakeBackend{m: map[int64]*JobInfo{}, nextID: 100} }

func (f *fakeBackend) name() string { return "fake" }
func (f *fakeBackend) nodes(context.Context) ([]NodeInfo, error) {
	var out []NodeInfo
	for _, n := range []string{"gpu1", "gpu2"} {
		out = append(out, NodeInfo{Name: n, State: "idle", Partitions: []string{"gpu"}, Gres: "gpu:h100:8,mps:h100:800,shard:h100:32", GresUsed: "gpu:h100:0(IDX:N/A)", CPUs: 32, MemoryMiB: 1000})
	}
	return out, nil
}
func (f *fakeBackend) jobs(context.Context) ([]JobInfo, error) {
	f.mu.Lock()
	delay := f.listDelay
	f.mu.Unlock()
	time.Sleep(delay)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	if f.listErr != nil {
		return nil, f.listErr
	}
	var out []JobInfo
	for _, j := range f.m {
		out = append(out, *j)
	}
	return out, nil
}
func (f *fakeBackend) submit(_ context.Context, req SubmitRequest) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.submits++
	f.nextID++
	f.m[f.nextID] = &JobInfo{ID: f.nextID, Name: req.Name, Comment: req.Comment, State: "PENDING", TresPerNode: "gres:" + req.Gres, NodeCount: int64(req.Nodes)}
	if f.lostAnswer != nil {
		return 0, f.lostAnswer
	}
	return f.nextID, nil
}
func (f *fakeBackend) cancel(_ context.Context, id int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.m[id]
	if j == nil {
		return &Error{Slurm: []SlurmError{{Code: codeInvalidJobID, Message: "Invalid job id specified"}}}
	}
	j.State = "CANCELLED"
	j.End = time.Unix(2000, 0)
	return nil
}

// set changes a job's state the way slurmctld would.
func (f *fakeBackend) set(id int64, state string, raw int64, start, end int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.m[id]
	j.State, j.ExitCode, j.Nodes = state, raw, "gpu1"
	if start > 0 {
		j.Start = time.Unix(start, 0)
	}
	if end > 0 {
		j.End = time.Unix(end, 0)
	}
}

func (f *fakeBackend) forget(id int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, id)
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newFakeConnector builds a connector on a fake backend; its poll loop is
// idle (1 h) so tests drive refresh themselves.
func newFakeConnector(t *testing.T, fb *fakeBackend, clk *fakeClock) *Connector {
	t.Helper()
	c := &Connector{
		cfg: Config{Partition: "gpu", Workdir: "/tmp", PollInterval: time.Hour, RetainFinished: time.Hour, RequestTimeout: 5 * time.Second, Now: clk.Now},
		log: slog.New(slog.DiscardHandler), now: clk.Now, primary: fb,
		recs: map[string]*record{}, rejected: map[string]string{}, uncertain: map[string]bool{},
		events: agent.NewEventQueue(),
		stop:   make(chan struct{}), done: make(chan struct{}),
	}
	c.start()
	t.Cleanup(c.Close)
	return c
}

func drain(c *Connector) []agent.WorkEvent {
	var out []agent.WorkEvent
	for {
		select {
		case ev := <-c.Events():
			out = append(out, ev)
		case <-time.After(100 * time.Millisecond):
			return out
		}
	}
}

func states(evs []agent.WorkEvent) string {
	var s []string
	for _, e := range evs {
		s = append(s, e.DispatchID+":"+e.State.String())
	}
	return strings.Join(s, " ")
}

func TestConnectorLifecycleAndMinJobAge(t *testing.T) {
	fb := newFakeBackend()
	clk := &fakeClock{t: time.Unix(1000, 0)}
	c := newFakeConnector(t, fb, clk)
	ctx := context.Background()
	d := newDispatch("life").Replicas(1).Milli(2000).Obj()
	if err := c.Launch(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := c.Launch(ctx, d); err != nil || fb.submits != 1 {
		t.Fatalf("second Launch: %v, %d submits", err, fb.submits)
	}
	id := fb.nextID
	steps := []struct {
		state      string
		raw        int64
		start, end int64
		want       string
	}{
		{"PENDING", 0, 0, 0, ""},
		{"RUNNING", 0, 1010, 0, "life:Running"},
		{"RUNNING", 0, 1010, 0, ""},
		{"COMPLETED", 0, 1010, 1070, "life:Succeeded"},
		{"COMPLETED", 0, 1010, 1070, ""},
	}
	for i, st := range steps {
		fb.set(id, st.state, st.raw, st.start, st.end)
		if err := c.refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if got := states(drain(c)); got != st.want {
			t.Fatalf("step %d (%s): events %q, want %q", i, st.state, got, st.want)
		}
	}
	// Slurm forgets the job (MinJobAge): the connector still knows the end.
	fb.forget(id)
	clk.Add(10 * time.Minute)
	list, err := c.List(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("List: %v %v", list, err)
	}
	w := list[0]
	if w.State != agent.StateSucceeded || w.ExitCode == nil || *w.ExitCode != 0 || w.GPUMilliSeconds != 2000*60 || !w.FinishedAt.Equal(time.Unix(1070, 0)) {
		t.Fatalf("after Slurm forgot the job: %+v", w)
	}
	if got := states(drain(c)); got != "" {
		t.Fatalf("forgetting a finished job emitted %q", got)
	}
	// After RetainFinished the record goes too.
	clk.Add(2 * time.Hour)
	if list, _ := c.List(ctx); len(list) != 0 {
		t.Fatalf("finished record kept past RetainFinished: %+v", list)
	}
}

func TestConnectorFastJobAndVanishedJob(t *testing.T) {
	fb := newFakeBackend()
	clk := &fakeClock{t: time.Unix(1000, 0)}
	c := newFakeConnector(t, fb, clk)
	ctx := context.Background()
	fast, lost := newDispatch("fast").Obj(), newDispatch("lost").Obj()
	if err := c.Launch(ctx, fast); err != nil {
		t.Fatal(err)
	}
	fastID := fb.nextID
	if err := c.Launch(ctx, lost); err != nil {
		t.Fatal(err)
	}
	lostID := fb.nextID
	// fast ran and failed between two polls: Running is still sent first.
	fb.set(fastID, "FAILED", 768, 1001, 1002)
	fb.set(lostID, "RUNNING", 0, 1001, 0)
	if err := c.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	evs := drain(c)
	if got := states(evs); got != "fast:Running fast:Failed lost:Running" && got != "lost:Running fast:Running fast:Failed" {
		t.Fatalf("events %q", got)
	}
	for _, e := range evs {
		if e.DispatchID == "fast" && e.State == agent.StateFailed && (e.ExitCode == nil || *e.ExitCode != 3 || e.WallTime != time.Second) {
			t.Fatalf("fast failure %+v", e)
		}
	}
	// lost vanishes while running (agent was away past MinJobAge):
	// reported Failed after three polls, not at the first miss.
	fb.forget(lostID)
	clk.Add(time.Minute)
	for i := 0; i < 2; i++ {
		_ = c.refresh(ctx)
	}
	if got := states(drain(c)); got != "" {
		t.Fatalf("vanished job reported too early: %q", got)
	}
	_ = c.refresh(ctx)
	evs = drain(c)
	if len(evs) != 1 || evs[0].State != agent.StateFailed || !strings.Contains(evs[0].Reason, "vanished") {
		t.Fatalf("vanished job: %+v", evs)
	}
}

func TestConnectorRestartAdoptsJobs(t *testing.T) {
	fb := newFakeBackend()
	clk := &fakeClock{t: time.Unix(1000, 0)}
	c1 := newFakeConnector(t, fb, clk)
	ctx := context.Background()
	if err := c1.Launch(ctx, newDispatch("keep").Milli(8000).Obj()); err != nil {
		t.Fatal(err)
	}
	fb.set(fb.nextID, "RUNNING", 0, 1000, 0)
	// A job the hub did not start, and one of another cluster.
	fb.m[1] = &JobInfo{ID: 1, Comment: "hand-made", State: "RUNNING"}
	fb.m[2] = &JobInfo{ID: 2, Comment: Comment("other", "x", "y"), State: "RUNNING"}
	c1.cfg.ClusterID = ""
	c1.Close()

	c2 := newFakeConnector(t, fb, clk)
	c2.cfg.ClusterID = "mine"
	fb.m[3] = &JobInfo{ID: 3, Comment: Comment("mine", "m", "w"), State: "RUNNING", Nodes: "gpu2", Start: time.Unix(1000, 0), TresPerNode: "gres:gpu:h100:8", NodeCount: 1}
	clk.Add(10 * time.Second)
	list, err := c2.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].DispatchID != "m" || list[0].State != agent.StateRunning || list[0].GPUMilliSeconds != 8000*10 {
		t.Fatalf("restarted List = %+v; want only this cluster's job", list)
	}
	// Cancel of the other cluster's dispatch is a no-op and leaves its job.
	if err := c2.Cancel(ctx, "x", false); err != nil || fb.m[2].State != "RUNNING" || fb.m[1].State != "RUNNING" {
		t.Fatalf("Cancel touched a foreign job: %v %+v %+v", err, fb.m[1], fb.m[2])
	}
	if err := c2.Cancel(ctx, "m", true); err != nil {
		t.Fatal(err)
	}
	_ = c2.refresh(ctx)
	var got []string
	for _, e := range drain(c2) {
		got = append(got, e.State.String())
	}
	if strings.Join(got, ",") != "Running,Preempted" {
		t.Fatalf("events %v, want Running then Preempted", got)
	}
}

func TestConnectorListErrorsAreRetryable(t *testing.T) {
	fb := newFakeBackend()
	fb.listErr = &Error{Op: "list jobs", Backend: "fake", Err: errors.New("connection refused")}
	c := newFakeConnector(t, fb, &fakeClock{t: time.Unix(1000, 0)})
	err := c.Launch(context.Background(), newDispatch("a").Obj())
	if err == nil || agent.IsRejected(err) || fb.submits != 0 {
		t.Fatalf("Launch while Slurm cannot be listed = %v (%d submits), want a retryable error and no submit", err, fb.submits)
	}
	if _, err := c.List(context.Background()); err == nil {
		t.Fatal("List hid the error")
	}
}

// TestLaunchListsJobsOnlyUntilSynced: before the first poll Launch must look
// in Slurm for an existing job (an agent restart); after it, memory is
// complete and Launch submits without listing Slurm's whole queue, except
// for a dispatch whose earlier submit failed with a fault (the job may
// exist although the answer was lost).
func TestLaunchListsJobsOnlyUntilSynced(t *testing.T) {
	fb := newFakeBackend()
	clk := &fakeClock{t: time.Unix(1000, 0)}
	c := newFakeConnector(t, fb, clk)
	ctx := context.Background()
	launch := func(name string) error { return c.Launch(ctx, newDispatch(name).Obj()) }
	steps := []struct {
		name           string
		do             func() error
		wantErr        bool
		lists, submits int
	}{
		// The first Launch also reads the cluster's shape (an inventory,
		// which reuses the listing it just made).
		{"before the first poll Launch looks", func() error { return launch("a") }, false, 1, 1},
		{"the first poll", func() error { return c.refresh(ctx) }, false, 2, 1},
		{"after it Launch does not look", func() error { return launch("b") }, false, 2, 2},
		{"a submit whose answer is lost", func() error {
			fb.mu.Lock()
			fb.lostAnswer = &Error{Op: "submit", Backend: "fake", Err: errors.New("connection reset")}
			fb.mu.Unlock()
			defer func() { fb.mu.Lock(); fb.lostAnswer = nil; fb.mu.Unlock() }()
			return launch("c")
		}, true, 2, 3},
		{"its retry looks and adopts the job", func() error { return launch("c") }, false, 3, 3},
		{"a known dispatch neither looks nor submits", func() error { return launch("c") }, false, 3, 3},
	}
	for _, st := range steps {
		err := st.do()
		if (err != nil) != st.wantErr {
			t.Fatalf("%s: err %v, want error %v", st.name, err, st.wantErr)
		}
		fb.mu.Lock()
		lists, submits := fb.lists, fb.submits
		fb.mu.Unlock()
		if lists != st.lists || submits != st.submits {
			t.Fatalf("%s: %d listings and %d submits, want %d and %d", st.name, lists, submits, st.lists, st.submits)
		}
	}
	jobs, _ := fb.jobs(ctx)
	per := map[string]int{}
	for _, j := range jobs {
		tag, _ := ParseComment(j.Comment)
		per[tag.DispatchID]++
	}
	for _, id := range []string{"a", "b", "c"} {
		if per[id] != 1 {
			t.Errorf("dispatch %s has %d jobs, want 1 (all: %v)", id, per[id], per)
		}
	}
}

// TestInventoryReusesAFreshJobList: an inventory right after a poll reuses
// its job list (the agent asks for one after every change, and listing
// every job each time loads slurmctld); an older list is read again.
func TestInventoryReusesAFreshJobList(t *testing.T) {
	fb := newFakeBackend()
	clk := &fakeClock{t: time.Unix(1000, 0)}
	c := newFakeConnector(t, fb, clk)
	ctx := context.Background()
	lists := func() int { fb.mu.Lock(); defer fb.mu.Unlock(); return fb.lists }
	steps := []struct {
		name  string
		age   time.Duration // how old the last list is made before the step
		do    func() error
		lists int
	}{
		{"a poll lists", 0, func() error { return c.refresh(ctx) }, 1},
		{"an inventory just after reuses it", 0, func() error { _, err := c.Inventory(ctx); return err }, 1},
		{"an inventory after jobListReuse lists again", jobListReuse + time.Millisecond, func() error { _, err := c.Inventory(ctx); return err }, 2},
		{"a poll always lists", 0, func() error { return c.refresh(ctx) }, 3},
	}
	for _, st := range steps {
		c.mu.Lock()
		c.lastJobsAt = c.lastJobsAt.Add(-st.age)
		c.mu.Unlock()
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := lists(); got != st.lists {
			t.Fatalf("%s: %d listings, want %d", st.name, got, st.lists)
		}
	}
}

// TestConcurrentLaunchesAndCancels: the agent calls Launch and Cancel
// concurrently for different dispatch ids (and, by mistake or redelivery,
// for one id). Every distinct dispatch gets exactly one job, duplicates of
// one id get one job between them, cancels reach their jobs, nothing is
// rejected, and concurrent look-ups share job listings. Run with -race.
func TestConcurrentLaunchesAndCancels(t *testing.T) {
	fb := newFakeBackend()
	fb.listDelay = 20 * time.Millisecond
	clk := &fakeClock{t: time.Unix(1000, 0)}
	c := newFakeConnector(t, fb, clk) // not synced: every Launch looks in Slurm
	ctx := context.Background()
	const distinct, dups = 24, 12
	var wg sync.WaitGroup
	errs := make(chan error, distinct+dups+8)
	start := make(chan struct{})
	for i := range distinct {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := c.Launch(ctx, newDispatch(fmt.Sprintf("d%d", i)).Obj()); err != nil {
				errs <- fmt.Errorf("Launch d%d: %w", i, err)
			}
		}()
	}
	for i := range dups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := c.Launch(ctx, newDispatch("dup").Obj()); err != nil {
				errs <- fmt.Errorf("Launch dup #%d: %w", i, err)
			}
		}()
	}
	// Polls, inventories and lists run beside the launches, as the
	// agent's loops do.
	for range 2 {
		wg.Add(3)
		go func() { defer wg.Done(); <-start; _ = c.refresh(ctx) }()
		go func() { defer wg.Done(); <-start; _, _ = c.Inventory(ctx) }()
		go func() { defer wg.Done(); <-start; _, _ = c.List(ctx) }()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	fb.mu.Lock()
	submits, lists := fb.submits, fb.lists
	fb.mu.Unlock()
	if submits != distinct+1 {
		t.Errorf("%d submits, want %d (one per distinct dispatch, one for the duplicates)", submits, distinct+1)
	}
	// 24 + 1 look-ups and 6 polls, inventories and lists: unshared, that
	// would be over 30 listings.
	if lists >= distinct {
		t.Errorf("%d job listings for %d concurrent look-ups: listings are not shared", lists, distinct+1)
	}
	jobs, _ := fb.jobs(ctx)
	per := map[string]int{}
	for _, j := range jobs {
		tag, _ := ParseComment(j.Comment)
		per[tag.DispatchID]++
	}
	if per["dup"] != 1 {
		t.Errorf("dispatch dup has %d jobs, want 1", per["dup"])
	}
	for i := range distinct {
		if n := per[fmt.Sprintf("d%d", i)]; n != 1 {
			t.Errorf("dispatch d%d has %d jobs, want 1", i, n)
		}
	}

	// Cancels of half the dispatches, concurrent with each other, with
	// duplicate Launches of the other half and with a poll.
	start = make(chan struct{})
	errs = make(chan error, distinct+1)
	for i := range distinct {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			id := fmt.Sprintf("d%d", i)
			var err error
			if i%2 == 0 {
				err = c.Cancel(ctx, id, false)
			} else {
				err = c.Launch(ctx, newDispatch(id).Obj())
			}
			if err != nil {
				errs <- fmt.Errorf("%s: %w", id, err)
			}
		}()
	}
	wg.Add(1)
	go func() { defer wg.Done(); <-start; _ = c.refresh(ctx) }()
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	fb.mu.Lock()
	cancelled := 0
	for _, j := range fb.m {
		if j.State == "CANCELLED" {
			cancelled++
		}
	}
	submits = fb.submits
	fb.mu.Unlock()
	if cancelled != distinct/2 || submits != distinct+1 {
		t.Errorf("%d jobs cancelled and %d submitted, want %d and %d", cancelled, submits, distinct/2, distinct+1)
	}
	if n := c.ids.size(); n != 0 {
		t.Errorf("%d per-dispatch locks left after every call returned, want 0", n)
	}
}

// TestDispatchLockHonoursContext: a Launch waiting behind another Launch of
// the same id gives up when its context ends.
func TestDispatchLockHonoursContext(t *testing.T) {
	var l idLocks
	unlock, err := l.lock(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.lock(ctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock of a held id: %v, want the context's deadline", err)
	}
	other, err := l.lock(context.Background(), "b")
	if err != nil {
		t.Fatalf("another id must not wait: %v", err)
	}
	other()
	unlock()
	if n := l.size(); n != 0 {
		t.Fatalf("%d entries left, want 0", n)
	}
}
