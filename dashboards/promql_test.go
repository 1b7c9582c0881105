package dashboards

import (
	"slices"
	"strings"
	"testing"
)

func TestMetricNames(t *testing.T) {
	for name, tc := range map[string]struct {
		expr string
		want []string
	}{
		"selector":     {`meridian_dispatches_total`, []string{"meridian_dispatches_total"}},
		"matchers":     {`meridian_cluster_state{state="LOST", cluster=~"a|b"} == 1`, []string{"meridian_cluster_state"}},
		"rate":         {`sum by (class) (rate(meridian_evictions_total{reason!=""}[$__rate_interval]))`, []string{"meridian_evictions_total"}},
		"quantile":     {`histogram_quantile(0.99, sum by (le) (rate(meridian_scheduler_cycle_seconds_bucket[5m])))`, []string{"meridian_scheduler_cycle_seconds_bucket"}},
		"binary":       {`1 - sum(meridian_cluster_free_gpus) / sum without (class) (meridian_cluster_capacity_gpus)`, []string{"meridian_cluster_capacity_gpus", "meridian_cluster_free_gpus"}},
		"matching":     {`a_total / on (queue) group_left (class) b_gauge and ignoring(x) c unless d offset 5m`, []string{"a_total", "b_gauge", "c", "d"}},
		"recorded":     {`meridian:dispatch_slo_errors:ratio_rate5m > (14.4 * 0.01)`, []string{"meridian:dispatch_slo_errors:ratio_rate5m"}},
		"variables":    {`meridian_queue_usage_gpus{queue=~"$queue", class=~"${class}"} * $factor`, []string{"meridian_queue_usage_gpus"}},
		"strings":      {`label_replace(up{job="meridian-hub"}, "x", "$1", "instance", "(.*):.*")`, []string{"up"}},
		"numbers":      {`x > 1e3 and y < 0x1f and z > .5`, []string{"x", "y", "z"}},
		"keyword bool": {`up == bool 0`, []string{"up"}},
		"time":         {`time() - meridian_cluster_last_heartbeat_timestamp_seconds`, []string{"meridian_cluster_last_heartbeat_timestamp_seconds"}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := MetricNames(tc.expr)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("MetricNames(%q) = %v, want %v", tc.expr, got, tc.want)
			}
		})
	}
	for _, bad := range []string{`sum(x`, `x)`, `x{a="b"`, `x{a="b}`, `x[5m`, `x}`} {
		if _, err := MetricNames(bad); err == nil || !strings.Contains(err.Error(), "promql") {
			t.Errorf("MetricNames(%q) = %v, want an error", bad, err)
		}
	}
}

func TestBaseName(t *testing.T) {
	for in, want := range map[string]string{"a_seconds_bucket": "a_seconds", "a_sum": "a", "a_count": "a", "a_total": "a_total"} {
		if got, _ := BaseName(in); got != want {
			t.Errorf("BaseName(%q) = %q, want %q", in, got, want)
		}
	}
}
