package k8shub

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/meridian-gpu/meridian/connectors/kubernetes"
	"github.com/meridian-gpu/meridian/internal/k8slocal"
)

// ConnectorConfig is a connector configuration for the local control plane
// (k8slocal.Up): the Jobs go to namespace, every object carries clusterID,
// and the pods tolerate the KWOK nodes' taint.
func ConnectorConfig(l *k8slocal.Local, clusterID, namespace string) kubernetes.Config {
	return kubernetes.Config{
		REST:        l.REST,
		Namespace:   namespace,
		ClusterID:   clusterID,
		Tolerations: []corev1.Toleration{k8slocal.KWOKToleration},
	}
}

// RunFor is a workload's runtime.extra that keeps its pods Running for d
// before KWOK completes them. The jitter must be set as well: KWOK's
// default jitter (5s) would otherwise cap the delay.
func RunFor(d time.Duration) map[string]any {
	s := d.String()
	return map[string]any{kubernetes.ExtraPodAnnotations: map[string]any{
		"pod-complete.stage.kwok.x-k8s.io/delay":        s,
		"pod-complete.stage.kwok.x-k8s.io/jitter-delay": s,
	}}
}
