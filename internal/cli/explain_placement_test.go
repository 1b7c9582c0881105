package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// explain prints why a dispatched workload's cluster was chosen.
func TestPrintExplainShowsPlacement(t *testing.T) {
	var out bytes.Buffer
	a := &app{env: Env{Stdout: &out, Now: func() time.Time { return time.Unix(0, 0) }}}
	err := a.printExplain(context.Background(), &meridianv1.ExplainWorkloadResponse{
		WorkloadId: "wl-09", Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING,
		PlacementRule: "tightest fit: leaves 4 GPUs free on west vs 12 GPUs on east",
		Placement: []*meridianv1.ClusterScore{
			{Cluster: "west", Score: 4, Detail: "chosen; leaves 4 GPUs free", Chosen: true},
			{Cluster: "east", Score: 12, Detail: "leaves 12 GPUs free"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"Placement: tightest fit: leaves 4 GPUs free on west vs 12 GPUs on east", "west", "chosen; leaves 4 GPUs free", "east"} {
		if !strings.Contains(got, want) {
			t.Fatalf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Index(got, "west") > strings.Index(got, "  east") {
		t.Fatalf("the chosen cluster is not listed first:\n%s", got)
	}
}
