package simcluster

import (
	"reflect"
	"testing"
	"time"

	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// A finished status comes back from its encoding as it went in, with and
// without an exit code, and a cut-short record is an error, not a panic.
func TestFinishedRecordRoundTrip(t *testing.T) {
	exit := int32(-3)
	at := time.Unix(1_800_000_000, 123456789)
	for _, s := range []agent.WorkStatus{
		{DispatchID: "d-1", WorkloadID: "w-1", State: agent.StateFailed, Nodes: []string{"n1", "n2"}, StartedAt: at,
			FinishedAt: at.Add(time.Minute), ExitCode: &exit, Reason: "exited with code -3", GPUMilliSeconds: 120000},
		{DispatchID: "d-2", State: agent.StateCancelled, StartedAt: at, FinishedAt: at, Nodes: []string{}},
	} {
		b := encodeFinished(s)
		got, err := decodeFinished(s.DispatchID, b)
		if err != nil || !reflect.DeepEqual(got, s) {
			t.Fatalf("round trip: got %+v (%v), want %+v", got, err, s)
		}
		for i := range len(b) {
			if _, err := decodeFinished(s.DispatchID, b[:i]); err == nil {
				t.Fatalf("a record cut to %d of %d bytes decoded", i, len(b))
			}
		}
	}
}

func FuzzDecodeFinished(f *testing.F) {
	f.Add(encodeFinished(agent.WorkStatus{State: agent.StateSucceeded, Nodes: []string{"a"}, Reason: "r"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeFinished("d", b)
		if err == nil {
			if again := encodeFinished(s); string(again) != string(b) {
				// Varints have one encoding as written; a decoded record
				// re-encodes to what was read unless it was padded.
				if _, err := decodeFinished("d", again); err != nil {
					t.Fatalf("a decoded record does not re-encode: %v", err)
				}
			}
		}
	})
}
