package demo

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/meridian-gpu/meridian/internal/k8slocal"
)

// TestRealSpokeJoinsTheSimulatedClusters: a real spoke that replaces
// nothing (make demo-k8s) comes after the three simulated clusters, and
// its GPUs add to theirs in the tenant's quota.
func TestRealSpokeJoinsTheSimulatedClusters(t *testing.T) {
	real := &Spoke{ID: KubernetesClusterID, What: "real", Connector: nopConnector{},
		GPUs: map[string]int64{"nvidia-h100-80gb": 16, "nvidia-a100-80gb": 6}, Runtime: script}
	specs, err := Options{Real: real}.spokes()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range specs {
		ids = append(ids, s.id)
	}
	if strings.Join(ids, ",") != "us-east,eu-west,us-west,"+KubernetesClusterID || specs[3].conn == nil || specs[0].conn != nil {
		t.Fatalf("spokes %v, want the three simulated ones and then %s with its connector", ids, KubernetesClusterID)
	}
	if len(clusters) != 3 {
		t.Fatalf("joining changed the package's simulated clusters to %d", len(clusters))
	}
	gpus, err := capacity(specs, real)
	if err != nil {
		t.Fatal(err)
	}
	want := maps.Clone(classGPUs)
	want["nvidia-h100-80gb"] += 16
	want["nvidia-a100-80gb"] = 6
	if !maps.Equal(gpus, want) {
		t.Fatalf("capacity %v, want %v", gpus, want)
	}
}

func TestKubernetesUnavailableOnlyForWhatCannotRunHere(t *testing.T) {
	for _, err := range []error{k8slocal.ErrNotRoot, k8slocal.ErrNotBuilt, fmt.Errorf("%w\nbuild log", k8slocal.ErrBuildImpossible)} {
		if !KubernetesUnavailable(err) {
			t.Errorf("KubernetesUnavailable(%q) = false, want true (the demo is skipped)", err)
		}
	}
	for _, err := range []error{nil, errors.New("scripts/k8s-up.sh: exit status 1")} {
		if KubernetesUnavailable(err) {
			t.Errorf("KubernetesUnavailable(%v) = true, want false (a real failure)", err)
		}
	}
}
