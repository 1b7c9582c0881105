package cli

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/api/validation"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

func decodeForTest(data []byte) (*meridianv1.Workload, error) {
	return validation.DecodeWorkload(data)
}

func TestGPUs(t *testing.T) {
	for name, tc := range map[string]struct {
		milli int64
		want  string
	}{
		"zero":       {0, "0"},
		"whole":      {8000, "8"},
		"half":       {500, "0.5"},
		"quarter":    {2250, "2.25"},
		"milli":      {1, "0.001"},
		"many":       {1234567, "1234.567"},
		"negative":   {-1500, "-1.5"},
		"big whole":  {64_000_000, "64000"},
		"tenth":      {100, "0.1"},
		"near whole": {999, "0.999"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := gpus(tc.milli); got != tc.want {
				t.Errorf("gpus(%d) = %q, want %q", tc.milli, got, tc.want)
			}
		})
	}
}

func TestDuration(t *testing.T) {
	for name, tc := range map[string]struct {
		d    time.Duration
		want string
	}{
		"negative": {-time.Second, "0s"},
		"zero":     {0, "0s"},
		"seconds":  {45 * time.Second, "45s"},
		"minutes":  {3*time.Minute + 12*time.Second, "3m12s"},
		"hours":    {2*time.Hour + 5*time.Minute + 59*time.Second, "2h5m"},
		"days":     {76 * time.Hour, "3d4h"},
		"subsec":   {1500 * time.Millisecond, "1s"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := duration(tc.d); got != tc.want {
				t.Errorf("duration(%s) = %q, want %q", tc.d, got, tc.want)
			}
		})
	}
	if got := age(t0, nil); got != "-" {
		t.Errorf("age of a missing time = %q, want -", got)
	}
	if got := age(t0.Add(time.Minute), timestamppb.New(t0)); got != "1m0s" {
		t.Errorf("age = %q, want 1m0s", got)
	}
}

func TestMiB(t *testing.T) {
	for in, want := range map[int64]string{0: "-", 512: "512Mi", 20480: "20Gi", 81920: "80Gi", 1048576: "1Ti", 1500: "1500Mi"} {
		if got := mib(in); got != want {
			t.Errorf("mib(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestParsePhases(t *testing.T) {
	got, err := parsePhases([]string{"queued, RUNNING", "workload_phase_failed"})
	if err != nil {
		t.Fatal(err)
	}
	want := []meridianv1.WorkloadPhase{
		meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED,
		meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING,
		meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED,
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("phase %d = %v, want %v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"unspecified", "done", "WORKLOAD_PHASE_"} {
		_, err := parsePhases([]string{bad})
		if ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), "--phase") {
			t.Errorf("parsePhases(%q) = %v; want a usage error naming --phase", bad, err)
		}
	}
}

func TestDecodeQueues(t *testing.T) {
	tests := map[string]struct {
		doc     string
		paths   []string
		wantErr string
	}{
		"one":            {doc: "path: acme\nweight: 2\n", paths: []string{"acme"}},
		"json":           {doc: `{"path": "acme", "quotas": [{"acceleratorClass": "x", "nominalMilliGpus": "1000"}]}`, paths: []string{"acme"}},
		"several":        {doc: "path: a\n---\npath: a/b\n---   \npath: a/b/c\n", paths: []string{"a", "a/b", "a/b/c"}},
		"leading sep":    {doc: "---\npath: a\n---\n", paths: []string{"a"}},
		"comment only":   {doc: "path: a\n---\n# nothing\n", paths: []string{"a"}},
		"empty":          {doc: "\n", wantErr: "no queue in the document"},
		"unknown field":  {doc: "path: a\n---\npath: b\nweigth: 3\n", wantErr: `document 2 (line 3): unknown field "weigth"`},
		"not a mapping":  {doc: "- a\n- b\n", wantErr: "document 1 (line 1): must be a mapping"},
		"bad yaml":       {doc: "path: [a\n", wantErr: "document 1 (line 1): not valid YAML or JSON"},
		"duplicate keys": {doc: "path: a\npath: b\n", wantErr: "not valid YAML or JSON"},
		"wrong type":     {doc: "path: a\nweight: heavy\n", wantErr: "weight"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			qs, err := DecodeQueues([]byte(tc.doc))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var paths []string
			for _, q := range qs {
				paths = append(paths, q.GetPath())
			}
			if strings.Join(paths, " ") != strings.Join(tc.paths, " ") {
				t.Errorf("paths %v, want %v", paths, tc.paths)
			}
		})
	}
	if _, err := DecodeQueues(make([]byte, validation.MaxDocumentBytes+1)); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("oversized document: err = %v", err)
	}
}

func TestRPCErrorClasses(t *testing.T) {
	a := &app{hub: "hub:1", timeout: time.Second}
	ctx := t.Context()
	tests := map[string]struct {
		err  error
		code int
		msg  string
	}{
		"not found":         {status.Error(codes.NotFound, "x"), ExitNotFound, "workload wl-1 not found"},
		"already exists":    {status.Error(codes.AlreadyExists, "x"), ExitConflict, "workload wl-1 already exists: x"},
		"aborted":           {status.Error(codes.Aborted, "cas"), ExitConflict, "run the command again"},
		"precondition":      {status.Error(codes.FailedPrecondition, "has children"), ExitInvalid, "workload wl-1: has children"},
		"invalid no detail": {status.Error(codes.InvalidArgument, "bad"), ExitInvalid, "the hub rejected the workload: bad"},
		"refused":           {status.Error(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp: connect: connection refused\""), ExitUnavailable, "cannot reach the hub at hub:1"},
		"server busy":       {status.Error(codes.Unavailable, "no leader elected yet"), ExitUnavailable, "the hub at hub:1 is unavailable: no leader elected yet"},
		"deadline":          {status.Error(codes.DeadlineExceeded, "context deadline exceeded"), ExitUnavailable, "did not answer within 1s (raise --timeout)"},
		"denied":            {status.Error(codes.PermissionDenied, "not yours"), ExitDenied, "you may not access workload wl-1: not yours"},
		"unauthenticated":   {status.Error(codes.Unauthenticated, "who"), ExitDenied, "the hub did not accept your credentials: who; log in again or check --token/--context"},
		"too large":         {status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5614302 vs. 4194304)"), ExitError, "the hub's answer to the workload wl-1 is 5.4 MiB, larger than meridianctl accepts (4.0 MiB)"},
		"unimplemented":     {status.Error(codes.Unimplemented, "no"), ExitError, "older version"},
		"internal":          {status.Error(codes.Internal, "boom"), ExitError, "hub error (internal) on workload wl-1: boom"},
		"plain":             {errors.New("odd"), ExitError, "workload wl-1: odd"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := a.rpcError(ctx, tc.err, object{kind: "workload", id: "wl-1"})
			if got := ExitCode(err); got != tc.code {
				t.Errorf("exit code %d, want %d", got, tc.code)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("message %q lacks %q", err.Error(), tc.msg)
			}
			if !errors.Is(err, tc.err) {
				t.Errorf("the original error is not wrapped")
			}
		})
	}
}
