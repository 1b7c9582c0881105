package validation

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// FuzzDecodeWorkload checks that DecodeWorkload never panics, that every
// failure is a *DecodeError, that whatever decodes also survives
// validation without panicking, and that a decoded workload round-trips
// through JSON unchanged. Seeds live in testdata/fuzz/FuzzDecodeWorkload.
func FuzzDecodeWorkload(f *testing.F) {
	f.Add([]byte(goodYAML))
	f.Add([]byte(goodJSON))
	f.Add([]byte("queue: a\npodSets: [{name: x, replicas: 1}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := DecodeWorkload(data)
		if err != nil {
			if !IsDecodeError(err) {
				t.Fatalf("error %T %v is not a *DecodeError", err, err)
			}
			if w != nil {
				t.Fatal("non-nil workload returned with an error")
			}
			return
		}
		verr := ValidateWorkload(w)
		if verr != nil && len(FieldViolations(verr)) == 0 {
			t.Fatalf("validation error without field violations: %v", verr)
		}
		js, err := protojson.Marshal(w)
		if err != nil || len(js) > MaxDocumentBytes {
			return // e.g. a value JSON cannot carry; nothing to compare
		}
		again, err := DecodeWorkload(js)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", js, err)
		}
		if !proto.Equal(w, again) {
			t.Fatalf("round trip changed the workload:\n%v\n%v", w, again)
		}
	})
}

// FuzzValidateWorkload builds workloads from fuzzed fields and checks that
// ValidateWorkload never panics, always answers InvalidArgument with at
// least one violation (each naming a field) or nil, and that what it
// accepts really is within the documented limits.
func FuzzValidateWorkload(f *testing.F) {
	f.Add("acme/vision", "worker", int32(2), int32(0), int32(1000), int32(0), int32(4000), int32(0), "nvidia-h100-80gb", int32(0), int32(0), int32(0), "team", "vision", "key-1", uint8(1))
	f.Add("", "", int32(0), int32(-1), int32(1500), int32(-1), int32(-1), int32(-1), "H100", int32(7), int32(9), int32(2000000), "", "", "\x00", uint8(0))
	f.Add("a/b/c", "w", int32(9), int32(3), int32(8000), int32(10), int32(1), int32(1), "", int32(3), int32(4), int32(-5), "x/y", "z", "", uint8(17))
	f.Fuzz(func(t *testing.T, queue, psName string, replicas, minReplicas, gpuMilli, gpuMem, cpu, mem int32,
		class string, mode, topo, priority int32, labelKey, labelVal, idem string, nPodSets uint8) {
		w := &meridianv1.Workload{
			Queue:          queue,
			Priority:       priority,
			IdempotencyKey: idem,
			Labels:         map[string]string{labelKey: labelVal},
		}
		n := int(nPodSets % (MaxPodSets + 3))
		for i := 0; i < n; i++ {
			name := psName
			if i > 0 {
				name = psName + "-" + strings.Repeat("x", i)
			}
			w.PodSets = append(w.PodSets, &meridianv1.PodSet{
				Name: name, Replicas: replicas, MinReplicas: minReplicas,
				Topology: meridianv1.Topology(topo),
				Resources: &meridianv1.Resources{
					GpuMilli: gpuMilli, GpuMemoryMib: gpuMem, CpuMilli: cpu, MemoryMib: mem,
					AcceleratorClass: class, FractionalMode: meridianv1.FractionalMode(mode),
				},
			})
		}
		err := ValidateWorkload(w)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("code = %v, want InvalidArgument", status.Code(err))
			}
			vs := FieldViolations(err)
			if len(vs) == 0 {
				t.Fatal("error without violations")
			}
			for _, v := range vs {
				if v.GetField() == "" || v.GetDescription() == "" {
					t.Fatalf("violation without field or description: %v", v)
				}
			}
			return
		}
		// Accepted: it must respect the limits.
		if CheckQueuePath(queue) != nil || n < 1 || n > MaxPodSets {
			t.Fatalf("accepted bad queue %q or %d pod sets", queue, n)
		}
		if replicas < 1 || replicas > MaxReplicas || minReplicas < 0 || minReplicas > replicas {
			t.Fatalf("accepted replicas=%d min=%d", replicas, minReplicas)
		}
		if gpuMilli < 0 || gpuMilli > MaxGPUMilli || (gpuMilli > 1000 && gpuMilli%1000 != 0) {
			t.Fatalf("accepted gpu_milli=%d", gpuMilli)
		}
		if gpuMem < 0 || cpu < 0 || mem < 0 || cpu > MaxCPUMilli || mem > MaxMemoryMiB || gpuMem > MaxGPUMemoryMiB {
			t.Fatalf("accepted negative or oversized resources %d/%d/%d", gpuMem, cpu, mem)
		}
		if priority < MinPriority || priority > MaxPriority || len(idem) > MaxIdempotencyKeyLen || !isPrintableASCII(idem) {
			t.Fatalf("accepted priority %d or idempotency key %q", priority, idem)
		}
		if int64(replicas)*int64(n) > MaxTotalReplicas {
			t.Fatalf("accepted %d total replicas", int64(replicas)*int64(n))
		}
		if labelKey == "" || len(labelVal) > MaxLabelValueLength {
			t.Fatalf("accepted label %q=%q", labelKey, labelVal)
		}
	})
}
