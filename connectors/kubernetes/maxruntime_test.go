package kubernetes

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
)

// max_runtime becomes every Job's activeDeadlineSeconds, rounded up.
func TestRenderMaxRuntime(t *testing.T) {
	cfg := mustCfg(Config{ClusterID: "k1", Namespace: "ml"})
	for _, tc := range []struct {
		max  *durationpb.Duration
		want int64 // 0 = no deadline
	}{{nil, 0}, {durationpb.New(time.Hour), 3600}, {durationpb.New(1500 * time.Millisecond), 2}} {
		d := makeDispatch("d-mr").PodSet("a", 1, 1000).PodSet("b", 2, 1000).Container("img:1", "train").Obj()
		d.Workload.MaxRuntime = tc.max
		r, err := Render(cfg, d, clusterView{})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Jobs) != 2 {
			t.Fatalf("%d jobs, want 2", len(r.Jobs))
		}
		for _, j := range r.Jobs {
			got := j.Spec.ActiveDeadlineSeconds
			if (tc.want == 0) != (got == nil) || (got != nil && *got != tc.want) {
				t.Fatalf("max_runtime %v: job %s activeDeadlineSeconds %v, want %d", tc.max, j.Name, got, tc.want)
			}
		}
	}
}
