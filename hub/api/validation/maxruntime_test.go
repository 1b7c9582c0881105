package validation

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

func TestValidateMaxRuntime(t *testing.T) {
	cases := []struct {
		name     string
		d        *durationpb.Duration
		wantDesc string // "" = valid
	}{
		{"unset", nil, ""},
		{"one hour", durationpb.New(time.Hour), ""},
		{"thirty days", durationpb.New(MaxRuntimeLimit), ""},
		{"zero", durationpb.New(0), "must be positive"},
		{"negative", durationpb.New(-time.Minute), "must be positive"},
		{"too long", durationpb.New(MaxRuntimeLimit + time.Second), "at most 720h0m0s"},
		{"malformed", &durationpb.Duration{Seconds: 1, Nanos: -1}, "different signs"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := makeWorkload("acme").Mutate(func(w *meridianv1.Workload) { w.MaxRuntime = tc.d }).Obj()
			err := ValidateWorkload(w)
			if tc.wantDesc == "" {
				if err != nil {
					t.Fatalf("ValidateWorkload() = %v, want nil", err)
				}
				return
			}
			vs := FieldViolations(err)
			if len(vs) != 1 || vs[0].GetField() != "max_runtime" || !strings.Contains(vs[0].GetDescription(), tc.wantDesc) {
				t.Fatalf("violations = %v, want one on max_runtime containing %q", vs, tc.wantDesc)
			}
		})
	}
}
