package agent_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// BenchmarkDispatchToAccepted measures one agent on embedded NATS: the time
// from publishing a dispatch until the hub side holds its ACCEPTED event,
// and the agent's sustained throughput (run with -benchtime=2000x).
func BenchmarkDispatchToAccepted(b *testing.B) {
	e := newEnv(b, nil)
	sent := make([]time.Time, b.N)
	b.ResetTimer()
	start := time.Now()
	go func() {
		for i := 0; i < b.N; i++ {
			id := fmt.Sprintf("b%d", i)
			m := dispatchMsg(id, 0, nil)
			m.GetDispatch().Placement = nil
			m.GetDispatch().Workload.PodSets[0].Resources = &meridianv1.Resources{} // fits any number of times
			payload, _ := proto.Marshal(m)
			e.mu.Lock()
			sent[i] = time.Now()
			e.mu.Unlock()
			if _, err := e.hub.PublishDispatch(context.Background(), clusterID, id, payload); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		e.mu.Lock()
		n := 0
		for _, ev := range e.events {
			if ev.Type == accepted {
				n++
			}
		}
		e.mu.Unlock()
		if n == b.N {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d accepted", n, b.N)
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	lat := make([]time.Duration, b.N)
	e.mu.Lock()
	for i := range lat {
		lat[i] = e.arrived[agent.EventID(fmt.Sprintf("b%d", i), accepted)].Sub(sent[i])
	}
	e.mu.Unlock()
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "dispatches/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
