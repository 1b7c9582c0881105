package api

import (
	"strconv"

	"github.com/meridian-gpu/meridian/hub/records"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// checkView refuses a view number the API does not know, naming the field.
func checkView(v meridianv1.WorkloadView) error {
	if _, ok := meridianv1.WorkloadView_name[int32(v)]; !ok {
		return invalid("view", "unknown view %d; use WORKLOAD_VIEW_BASIC or WORKLOAD_VIEW_FULL", v)
	}
	return nil
}

// submitAnswer is a submit's result in the view the caller asked for.
// The basic view shares the stored workload's strings and maps, which is
// safe: the answer is only encoded.
func submitAnswer(r *meridianv1.SubmitWorkloadResponse, v meridianv1.WorkloadView) *meridianv1.SubmitWorkloadResponse {
	if r == nil || v != meridianv1.WorkloadView_WORKLOAD_VIEW_BASIC {
		return r
	}
	return &meridianv1.SubmitWorkloadResponse{Workload: records.BasicOf(r.GetWorkload()), Replayed: r.GetReplayed()}
}

// parseView reads a view from a query parameter: its name
// (WORKLOAD_VIEW_BASIC) or its number, as the gateway reads enums. The
// number's range is checkView's.
func parseView(s string) (meridianv1.WorkloadView, error) {
	if n, ok := meridianv1.WorkloadView_value[s]; ok {
		return meridianv1.WorkloadView(n), nil
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0, invalid("view", "query parameter %q is not a view; use WORKLOAD_VIEW_BASIC or WORKLOAD_VIEW_FULL", s)
	}
	return meridianv1.WorkloadView(n), nil
}
