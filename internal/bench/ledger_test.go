package bench

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// runLedger keeps, for each workload of a run, when it was due, sent and
// first seen ACCEPTED (or later), indexed by the number in its name
// (b-<j>). Its fields are exported so that the clients' process can send
// it whole (gob). Flat slices of nanoseconds rather than maps keyed by id: a
// ten-minute run at 2,000/s has 1.2 million workloads, and the
// benchmark's own bookkeeping must neither grow the heap it reports by
// much nor give the collector pointers to mark.
type runLedger struct {
	Due, Sent, Acc []int64 // UnixNano; 0: not yet
	Accepted       int
	// From the status first seen accepted (the hub's and the agents'
	// clocks, the same machine's): when the hub dispatched it, when the
	// agent reported it running, and when the hub wrote that; 0: unknown.
	// The timeline splits each second's latency at these.
	Dispatched, Started, Written []int64
}

func newRunLedger(n int) *runLedger {
	return &runLedger{Due: make([]int64, n), Sent: make([]int64, n), Acc: make([]int64, n),
		Dispatched: make([]int64, n), Started: make([]int64, n), Written: make([]int64, n)}
}

// stages records, for workload name, the times its status gives.
func (l *runLedger) stages(name string, st *meridianv1.WorkloadStatus) {
	j, ok := l.indexOf(name)
	if !ok {
		return
	}
	nanos := func(ts *timestamppb.Timestamp) int64 {
		if ts == nil {
			return 0
		}
		return ts.AsTime().UnixNano()
	}
	l.Dispatched[j], l.Started[j], l.Written[j] = nanos(st.GetDispatchTime()), nanos(st.GetStartTime()), nanos(st.GetUpdateTime())
}

// workloadName is the name of the benchmark's workload j.
func workloadName(j int) string { return fmt.Sprintf("b-%05d", j) }

// indexOf is j for a workload named workloadName(j).
func (l *runLedger) indexOf(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "b-")
	if !ok {
		return 0, false
	}
	j, err := strconv.Atoi(s)
	if err != nil || j < 0 || j >= len(l.Acc) {
		return 0, false
	}
	return j, true
}

// seen records the first time workload name was seen accepted, and
// reports whether this was it.
func (l *runLedger) seen(name string, at time.Time) bool {
	j, ok := l.indexOf(name)
	if !ok || l.Acc[j] != 0 {
		return false
	}
	l.Acc[j] = at.UnixNano()
	l.Accepted++
	return true
}

func since(from, to int64) float64 { return float64(to-from) / 1e6 }
