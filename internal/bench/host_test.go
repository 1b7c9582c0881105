package bench

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// cpuTimes is the machine's CPU time so far, in clock ticks, from the
// first line of /proc/stat: all of it, and the parts that say the run
// was not alone or waited on the kernel.
type cpuTimes struct {
	total, system, iowait, steal uint64
}

// parseCPUTimes reads the "cpu" line of /proc/stat: user nice system idle
// iowait irq softirq steal [guest guest_nice]. Guest time is already in
// user, so the total is the first eight.
func parseCPUTimes(line string) (cpuTimes, error) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("/proc/stat: %q is not the cpu line", line)
	}
	var v [8]uint64
	for i := range v {
		n, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("/proc/stat: field %d of the cpu line: %w", i+1, err)
		}
		v[i] = n
	}
	t := cpuTimes{system: v[2], iowait: v[4], steal: v[7]}
	for _, n := range v {
		t.total += n
	}
	return t, nil
}

func readCPUTimes() (cpuTimes, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return cpuTimes{}, fmt.Errorf("/proc/stat: empty")
	}
	return parseCPUTimes(sc.Text())
}

// hostShare is one interval's CPU split, in percent of all CPU time.
type hostShare struct{ steal, system, iowait float64 }

// shareBetween is the split of the time from a to b; zero when no time
// passed.
func shareBetween(a, b cpuTimes) hostShare {
	if b.total <= a.total {
		return hostShare{}
	}
	d := float64(b.total - a.total)
	return hostShare{steal: 100 * float64(b.steal-a.steal) / d, system: 100 * float64(b.system-a.system) / d,
		iowait: 100 * float64(b.iowait-a.iowait) / d}
}

// hostWatcher samples the machine's CPU split every second of a run: how
// much the host took back (steal), how much went to the kernel (system:
// page faults, writeback, syscalls) and how much waited on the disk. On a
// virtual machine these move a run's tail more than most code changes
// (docs/benchmarks.md), so each run reports them beside its figures and
// the timeline shows them per second.
type hostWatcher struct {
	first      cpuTimes
	stop, done chan struct{}

	mu   sync.Mutex
	last cpuTimes
	secs []hostShare // second k of the run, from when sampling began
}

// watchHost starts sampling (call it as the run starts); nil where
// /proc/stat cannot be read (the figures are then left out).
func watchHost() *hostWatcher {
	t, err := readCPUTimes()
	if err != nil {
		return nil
	}
	h := &hostWatcher{first: t, last: t, stop: make(chan struct{}), done: make(chan struct{})}
	go every(time.Second, h.stop, h.done, func() {
		now, err := readCPUTimes()
		if err != nil {
			return
		}
		h.mu.Lock()
		h.secs = append(h.secs, shareBetween(h.last, now))
		h.last = now
		h.mu.Unlock()
	})
	return h
}

// finish stops sampling and reports the run's averages and the seconds
// that stood out: host-steal-%, host-system-%, host-iowait-%, and how many
// seconds had more than 5% steal or 40% system time.
func (h *hostWatcher) finish(b *testing.B) {
	if h == nil {
		return
	}
	close(h.stop)
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	all := shareBetween(h.first, h.last)
	stolen, kernel := 0, 0
	for _, s := range h.secs {
		if s.steal > 5 {
			stolen++
		}
		if s.system > 40 {
			kernel++
		}
	}
	b.ReportMetric(all.steal, "host-steal-%")
	b.ReportMetric(all.system, "host-system-%")
	b.ReportMetric(all.iowait, "host-iowait-%")
	b.ReportMetric(float64(stolen), "host-seconds-steal-over-5%")
	b.ReportMetric(float64(kernel), "host-seconds-system-over-40%")
}

// second is the split of second s of the run (from its start), if it was
// sampled.
func (h *hostWatcher) second(s int) (hostShare, bool) {
	if h == nil {
		return hostShare{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s < 0 || s >= len(h.secs) {
		return hostShare{}, false
	}
	return h.secs[s], true
}

func TestParseCPUTimes(t *testing.T) {
	got, err := parseCPUTimes("cpu  4705 150 1120 16250 520 0 45 312 99 0")
	if err != nil {
		t.Fatal(err)
	}
	if want := (cpuTimes{total: 4705 + 150 + 1120 + 16250 + 520 + 45 + 312, system: 1120, iowait: 520, steal: 312}); got != want {
		t.Fatalf("parsed %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 3", "cpu 1 2 x 4 5 6 7 8"} {
		if _, err := parseCPUTimes(bad); err == nil {
			t.Errorf("%q parsed without an error", bad)
		}
	}
}

func TestShareBetween(t *testing.T) {
	a := cpuTimes{total: 1000, system: 100, iowait: 10, steal: 0}
	b := cpuTimes{total: 1200, system: 180, iowait: 20, steal: 10}
	if got, want := shareBetween(a, b), (hostShare{steal: 5, system: 40, iowait: 5}); got != want {
		t.Fatalf("share %+v, want %+v", got, want)
	}
	if got := shareBetween(b, b); got != (hostShare{}) {
		t.Fatalf("no time passed, share %+v", got)
	}
}
