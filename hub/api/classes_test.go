package api

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// fleetOf is a ClusterSource with fixed clusters.
type fleetOf []*meridianv1.Cluster

func (f fleetOf) ListClusters() []*meridianv1.Cluster { return f }
func (f fleetOf) GetCluster(id string) (*meridianv1.Cluster, bool) {
	for _, c := range f {
		if c.GetId() == id {
			return c, true
		}
	}
	return nil, false
}
func (fleetOf) SetDraining(context.Context, string, bool) error { return nil }

// ListAcceleratorClasses joins the three places the hub knows classes
// from: the fleet (capacity summed), quotas by name ("*" is no class),
// and the configured class weights.
func TestListAcceleratorClasses(t *testing.T) {
	fleet := fleetOf{
		{Id: "east", Capacity: []*meridianv1.ClassCapacity{{AcceleratorClass: "h100", TotalMilli: 8000, FreeMilli: 2000, Nodes: 1}}},
		{Id: "west", Capacity: []*meridianv1.ClassCapacity{
			{AcceleratorClass: "a100", TotalMilli: 4000, FreeMilli: 4000, Nodes: 1},
			{AcceleratorClass: "h100", TotalMilli: 16000, FreeMilli: 1000, Nodes: 2},
		}},
	}
	e := newEnv(t, func(d *Deps) { d.Clusters, d.ClassWeights = fleet, map[string]float64{"h100": 4, "t4": 0.5} })
	ctx := context.Background()
	for _, q := range []*meridianv1.Queue{
		{Path: "cls", Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: "l40s", NominalMilliGpus: 1000}, {AcceleratorClass: "*"}}},
		{Path: "cls/a", Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: "h100", NominalMilliGpus: 1000}}},
	} {
		if _, err := e.qs.CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: q}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := e.cs.ListAcceleratorClasses(ctx, &meridianv1.ListAcceleratorClassesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := []*meridianv1.AcceleratorClass{
		{Name: "a100", Clusters: []string{"west"}, TotalMilli: 4000, FreeMilli: 4000, Nodes: 1},
		{Name: "h100", Clusters: []string{"east", "west"}, TotalMilli: 24000, FreeMilli: 3000, Nodes: 3, InQuotas: true, ClassWeight: proto.Float64(4)},
		{Name: "l40s", InQuotas: true},
		{Name: "t4", ClassWeight: proto.Float64(0.5)},
	}
	// Other tests of this package share the etcd, and their queues name
	// classes too: look only at the ones this test set up.
	byName := map[string]*meridianv1.AcceleratorClass{}
	var names []string
	for _, c := range got.GetClasses() {
		byName[c.GetName()] = c
		names = append(names, c.GetName())
	}
	if !slices.IsSorted(names) {
		t.Errorf("classes are not sorted by name: %v", names)
	}
	for _, w := range want {
		if !proto.Equal(byName[w.GetName()], w) {
			t.Errorf("class %s = %v, want %v", w.GetName(), byName[w.GetName()], w)
		}
	}
}
