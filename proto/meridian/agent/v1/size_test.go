package agentv1_test

import (
	"strings"
	"testing"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

func TestPodSetSize(t *testing.T) {
	wl := &meridianv1.Workload{PodSets: []*meridianv1.PodSet{{Name: "w", Replicas: 8, MinReplicas: 2}, {Name: "l", Replicas: 1}}}
	tests := map[string]struct {
		placement []*agentv1.PodSetPlacement
		want      int32
		err       string
	}{
		"no placement: full size":  {want: 8},
		"admitted count":           {placement: []*agentv1.PodSetPlacement{{PodSet: "w", Nodes: []string{"a", "b", "c"}, Replicas: 3}}, want: 3},
		"old hub: count the nodes": {placement: []*agentv1.PodSetPlacement{{PodSet: "w", Nodes: []string{"a", "b", "c", "d"}}}, want: 4},
		"below min":                {placement: []*agentv1.PodSetPlacement{{PodSet: "w", Replicas: 1}}, err: "placement[w].replicas: the hub admitted 1"},
		"above replicas":           {placement: []*agentv1.PodSetPlacement{{PodSet: "w", Replicas: 9}}, err: "outside min_replicas..replicas (2..8)"},
		"unnamed by position":      {placement: []*agentv1.PodSetPlacement{{Replicas: 5}}, want: 5},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := &agentv1.Dispatch{Workload: wl, Placement: tc.placement}
			got, err := d.PodSetSize(0)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("PodSetSize = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
	if n, err := (&agentv1.Dispatch{Workload: wl}).PodSetSize(1); n != 1 || err != nil {
		t.Fatalf("non-elastic pod set: %d, %v", n, err)
	}
}
