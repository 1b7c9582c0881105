package bench

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// The machine's own speed, measured beside each run. On a shared virtual
// machine the same code costs up to a tenth more CPU from one hour to the
// next (docs/benchmarks.md); a fixed piece of work timed before the load
// and after it tells a reader whether two runs' CPU per workload differ
// because the product changed or because the machine did.

// calibrationKernel is the fixed work: hashing (arithmetic) and a random
// walk over a buffer larger than the caches (memory latency), the two
// things the hub's CPU per workload is mostly made of.
type calibrationKernel struct {
	data []byte
	walk []uint32
}

// newCalibrationKernel makes the work, its walk over slots four-byte
// slots (a power of two; the benchmark's span more than the caches).
func newCalibrationKernel(slots int) *calibrationKernel {
	k := &calibrationKernel{data: make([]byte, 4<<20), walk: make([]uint32, slots)}
	for i := range k.data {
		k.data[i] = byte(i)
	}
	// Each slot names the next by a full-period linear congruential step
	// (Hull-Dobell: the modulus a power of two, c odd, a-1 a multiple of
	// 4), so the walk visits every slot once per cycle in an order the
	// hardware cannot prefetch, and filling it costs one pass.
	const a, c = 1664525, 1013904223
	mask := uint32(len(k.walk) - 1)
	for i := range k.walk {
		k.walk[i] = (a*uint32(i) + c) & mask
	}
	return k
}

// once runs the work one time and returns how long it took.
func (k *calibrationKernel) once() (time.Duration, uint32) {
	start := time.Now()
	sum := sha256.Sum256(k.data)
	at := uint32(sum[0])
	for range 1 << 20 {
		at = k.walk[at&uint32(len(k.walk)-1)]
	}
	return time.Since(start), at
}

// bestAndMedian is the fastest and the median of tries runs, in ms. The
// fastest is the machine's speed, the least disturbed by whatever else
// the machine does at that moment; the median also shows how much others
// disturbed it (a neighbour that takes the memory bus slows the median
// and barely the best).
func (k *calibrationKernel) bestAndMedian(tries int) (best, median float64) {
	ds := make([]time.Duration, 0, tries)
	for range tries {
		d, _ := k.once()
		ds = append(ds, d)
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return ms(ds[0]), ms(ds[len(ds)/2])
}

// syncProbe times syncs of a small write in dir, the kind of write
// etcd's log makes for every transaction: the median of n, in
// microseconds. The disk's speed moves from hour to hour on a shared
// machine as the CPU's does, and a run whose kernel time or tail rose
// with it is then told apart from one whose code changed.
func syncProbe(dir string, n int) (float64, error) {
	f, err := os.CreateTemp(dir, "sync-probe-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	block := make([]byte, 4096)
	ds := make([]time.Duration, 0, n)
	for i := range n {
		start := time.Now()
		if _, err := f.WriteAt(block, int64(i)*int64(len(block))); err != nil {
			return 0, err
		}
		if err := f.Sync(); err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(start))
	}
	slices.Sort(ds)
	return float64(ds[len(ds)/2].Nanoseconds()) / 1000, nil
}

// calibrate measures the kernel now and returns a func that measures it
// again and reports both: machine-ms-before and machine-ms-after (lower
// is faster). Each measurement makes its own kernel and drops it: one
// kept alive through the run would be 68 MiB of the hub process's live
// heap, raising its collector's goal and so changing what the run
// measures.
//
// It also reports the median of the kernel's runs
// (machine-median-ms-before/-after) and the median time to write and
// sync 4 KiB in a directory beside the run's data
// (disk-sync-us-before/-after), so that a slower disk or a busier
// neighbour shows in the report as well as a slower core.
func calibrate(b *testing.B) (after func()) {
	dir := b.TempDir()
	best, median := machineMs()
	sync := diskSyncUs(b, dir)
	return func() {
		b.ReportMetric(best, "machine-ms-before")
		b.ReportMetric(median, "machine-median-ms-before")
		b.ReportMetric(sync, "disk-sync-us-before")
		best, median := machineMs()
		b.ReportMetric(best, "machine-ms-after")
		b.ReportMetric(median, "machine-median-ms-after")
		b.ReportMetric(diskSyncUs(b, dir), "disk-sync-us-after")
	}
}

// machineMs is the fastest and the median of five runs of a fresh
// kernel, in ms.
func machineMs() (best, median float64) {
	return newCalibrationKernel(calibrationSlots).bestAndMedian(5)
}

// diskSyncUs is syncProbe's median of 50 syncs in dir; a probe that
// cannot write is logged and reported as 0 rather than failing the run.
func diskSyncUs(b *testing.B, dir string) float64 {
	us, err := syncProbe(dir, 50)
	if err != nil {
		b.Logf("disk sync probe: %v", err)
		return 0
	}
	return us
}

// calibrationSlots makes the walk's buffer 64 MiB, beyond the caches.
const calibrationSlots = 1 << 24

func TestCalibrationKernelIsStable(t *testing.T) {
	k := newCalibrationKernel(1 << 16)
	_, end1 := k.once()
	_, end2 := k.once()
	if end1 != end2 {
		t.Fatalf("the walk ended at %d, then at %d: the work is not fixed", end1, end2)
	}
	// Every slot on one cycle: from 0, the walk returns to 0 after
	// exactly len(walk) steps and not before.
	at, steps := k.walk[0], 1
	for at != 0 && steps <= len(k.walk) {
		at = k.walk[at]
		steps++
	}
	if steps != len(k.walk) {
		t.Fatalf("the walk's cycle has %d steps, want %d", steps, len(k.walk))
	}
	if ms, _ := k.bestAndMedian(1); ms <= 0 {
		t.Fatalf("best of one run: %v ms", ms)
	}
	if best, median := k.bestAndMedian(3); best <= 0 || median < best {
		t.Fatalf("best %v ms, median %v ms: the median cannot be faster than the best", best, median)
	}
}

func TestSyncProbeTimesSyncs(t *testing.T) {
	us, err := syncProbe(t.TempDir(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if us <= 0 {
		t.Fatalf("median sync took %v µs", us)
	}
	if _, err := syncProbe(filepath.Join(t.TempDir(), "missing"), 1); err == nil {
		t.Fatal("a probe in a missing directory did not fail")
	}
}
