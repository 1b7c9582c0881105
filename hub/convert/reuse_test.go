package convert

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/hub/scheduler"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
)

// Converting a changed advertisement while reusing the unchanged nodes'
// conversions gives what converting it whole gives, and takes the
// unchanged nodes from prev rather than converting them again.
func TestClusterReusingMatchesCluster(t *testing.T) {
	node := func(name string, free int32) *agentv1.Node {
		return &agentv1.Node{Name: name, AcceleratorClass: "h100", Schedulable: true, Gpus: []*agentv1.Gpu{gpu(1, free, true), gpu(0, 1000, true)}}
	}
	before := &agentv1.Advertisement{ClusterId: "east", Nodes: []*agentv1.Node{node("n1", 1000), node("n2", 1000), node("n3", 1000)}}
	prev, err := Cluster(before, scheduler.ClusterReady, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	// n2 changed, n3 removed, n0 added; n1 as before.
	after := &agentv1.Advertisement{ClusterId: "east", Nodes: []*agentv1.Node{node("n0", 500), node("n1", 1000), node("n2", 250)}}
	changed := map[string]bool{"n0": true, "n2": true, "n3": true}
	got, err := ClusterReusing(after, scheduler.ClusterReady, time.Time{}, prev, changed)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Cluster(after, scheduler.ClusterReady, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("reusing gave %+v, converting whole gave %+v", got, want)
	}
	if &got.Nodes[1].Res.GPUs[0] != &prev.Nodes[0].Res.GPUs[0] {
		t.Fatal("the unchanged node n1 was converted again instead of reused")
	}
	// A changed node is never reused, even when prev has it.
	stale := &agentv1.Advertisement{ClusterId: "east", Nodes: []*agentv1.Node{node("n1", 0)}}
	got, err = ClusterReusing(stale, scheduler.ClusterReady, time.Time{}, prev, map[string]bool{"n1": true})
	if err != nil || got.Nodes[0].Res.GPUs[1].FreeMilli != 0 {
		t.Fatalf("n1 marked changed kept its old conversion: %+v (%v)", got.Nodes, err)
	}
	// Errors still name the node.
	bad := &agentv1.Advertisement{ClusterId: "east", Nodes: []*agentv1.Node{node("n1", 1000), node("n1", 1000)}}
	if _, err := ClusterReusing(bad, scheduler.ClusterReady, time.Time{}, prev, nil); err == nil || !strings.Contains(err.Error(), `nodes[1].name: "n1" is listed twice`) {
		t.Fatalf("a node listed twice: %v, want an error naming nodes[1]", err)
	}
}
