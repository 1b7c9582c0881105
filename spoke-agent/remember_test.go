package agent

import (
	"testing"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
)

// A remembered answer comes back equal to what was remembered, a fresh
// copy each time, even with a reason that is not UTF-8 (a connector's
// words are not checked).
func TestRememberedEventRoundTrip(t *testing.T) {
	for _, reason := range []string{"exit code 1", "bad \xff bytes"} {
		ev := &agentv1.DispatchEvent{DispatchId: "d-1", WorkloadId: "w-1", Type: agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_FAILED,
			Reason: reason, Seq: 7, SessionId: "s"}
		d, err := rememberedEvent(ev)
		if err != nil || len(d) == 0 {
			t.Fatalf("reason %q: not encoded (%v), want encoded", reason, err)
		}
		got, err := d.event()
		if err != nil || !proto.Equal(got, ev) {
			t.Fatalf("reason %q: got %v (%v), want %v", reason, got, err, ev)
		}
		got.Seq = 99
		again, _ := d.event()
		if again.Seq != 7 {
			t.Fatal("changing one copy changed the remembered answer")
		}
	}
}
