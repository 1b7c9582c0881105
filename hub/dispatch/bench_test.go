package dispatch

import (
	"fmt"
	"sort"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// BenchmarkDispatchToAccepted measures the loop end to end on embedded etcd
// and NATS: workloads stored as QUEUED, dispatched, published, launched by
// simulated agents on 10 clusters, and recorded ACCEPTED or RUNNING. It
// reports workloads/s and the p50/p99 latency from store to launch.
func BenchmarkDispatchToAccepted(b *testing.B) {
	const n = 2000
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		cfg := fastConfig()
		cfg.RepublishAfter = 10 * time.Second // the production default; acks may lag under load
		e := newEnv(b, cfg)
		e.putQueue("acme/ml/train", n)
		var agents []*agent
		for c := 0; c < 10; c++ {
			agents = append(agents, e.startAgent(fmt.Sprintf("c%d", c), 4, 64, 0))
		}
		h := e.startHub("hub-bench")
		e.waitFor("leadership", 10*time.Second, h.leading)
		for c := 0; c < 10; c++ {
			e.waitKnown(h, fmt.Sprintf("c%d", c))
		}
		var ws []*meridianv1.Workload
		for j := 0; j < n; j++ {
			ws = append(ws, gpuWorkload(fmt.Sprintf("w%05d", j), "acme/ml/train", 1))
		}
		b.StartTimer()
		start := time.Now()
		e.submit(ws...)
		e.waitFor("all launched", 120*time.Second, func() bool {
			total := 0
			for _, a := range agents {
				total += a.totalLaunches()
			}
			return total == n
		})
		elapsed := time.Since(start)
		e.waitFor("all recorded running", 120*time.Second, func() bool {
			return e.countPhase(meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING) == n
		})
		recorded := time.Since(start)
		b.StopTimer()
		var lat []time.Duration
		for _, w := range e.workloads() {
			lat = append(lat, w.GetStatus().GetDispatchTime().AsTime().Sub(w.GetCreateTime().AsTime()))
		}
		sort.Slice(lat, func(a, c int) bool { return lat[a] < lat[c] })
		b.ReportMetric(float64(n)/elapsed.Seconds(), "launched/s")
		b.ReportMetric(float64(n)/recorded.Seconds(), "running-recorded/s")
		b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-submit-to-dispatch-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "p99-submit-to-dispatch-ms")
		var hm dto.Metric
		_ = h.loop.m.cycle.Write(&hm)
		b.Logf("cycles %d, mean %.1fms; publishes %v, duplicates %v, republished at takeover %v", hm.GetHistogram().GetSampleCount(),
			1000*hm.GetHistogram().GetSampleSum()/float64(max(1, hm.GetHistogram().GetSampleCount())), metricValue(b, h.loop.m.published), metricValue(b, h.loop.m.duplicates), metricValue(b, h.loop.m.republished))
		b.Logf("events: accepted %v, rejected %v, running %v, stale %v; dispatches %v", metricValue(b, h.loop.m.events.WithLabelValues("DISPATCH_EVENT_TYPE_ACCEPTED")),
			metricValue(b, h.loop.m.events.WithLabelValues("DISPATCH_EVENT_TYPE_REJECTED")), metricValue(b, h.loop.m.events.WithLabelValues("DISPATCH_EVENT_TYPE_RUNNING")), metricValue(b, h.loop.m.staleEvents),
			metricValue(b, h.loop.m.dispatches))
		for _, hh := range e.hubs {
			hh.kill()
		}
	}
}
