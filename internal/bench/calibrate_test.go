package bench

import (
	"crypto/sha256"
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

// best is the fastest of tries runs, in ms: the least disturbed by
// whatever else the machine does at that moment.
func (k *calibrationKernel) best(tries int) float64 {
	bestD := time.Duration(1<<63 - 1)
	for range tries {
		d, _ := k.once()
		bestD = min(bestD, d)
	}
	return float64(bestD.Microseconds()) / 1000
}

// calibrate measures the kernel now and returns a func that measures it
// again and reports both: machine-ms-before and machine-ms-after (lower
// is faster). Each measurement makes its own kernel and drops it: one
// kept alive through the run would be 68 MiB of the hub process's live
// heap, raising its collector's goal and so changing what the run
// measures.
func calibrate(b *testing.B) (after func()) {
	before := machineMs()
	return func() {
		b.ReportMetric(before, "machine-ms-before")
		b.ReportMetric(machineMs(), "machine-ms-after")
	}
}

// machineMs is the fastest of five runs of a fresh kernel, in ms.
func machineMs() float64 { return newCalibrationKernel(calibrationSlots).best(5) }

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
	if ms := k.best(1); ms <= 0 {
		t.Fatalf("best of one run: %v ms", ms)
	}
}
