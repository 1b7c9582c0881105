package kubernetes

import (
	"strings"
	"testing"
)

func TestClassFromProduct(t *testing.T) {
	tests := map[string]struct {
		product string
		mem     int64
		want    string
	}{
		"h100 hbm3":       {"NVIDIA-H100-80GB-HBM3", 81559, "nvidia-h100-80gb"},
		"a100 sxm4":       {"NVIDIA-A100-SXM4-80GB", 81920, "nvidia-a100-80gb"},
		"mig suffix":      {"NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", 40960, "nvidia-a100-40gb"},
		"no memory token": {"NVIDIA-L40S", 46068, "nvidia-l40s-45gb"},
		"no memory label": {"NVIDIA-L4", 0, "nvidia-l4"},
		"spaces":          {"Tesla V100 SXM2 16GB", 0, "nvidia-v100-16gb"},
		"empty":           {"", 81920, ""},
		"only dropped":    {"PCIe", 0, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := ClassFromProduct(tc.product, tc.mem); got != tc.want {
				t.Fatalf("ClassFromProduct(%q, %d) = %q, want %q", tc.product, tc.mem, got, tc.want)
			}
		})
	}
}

func TestParseMIGProfile(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    MIGProfile
		milli   int32
		wantErr string
	}{
		"name":           {in: "1g.10gb", want: MIGProfile{"1g.10gb", 1, 10}, milli: 142},
		"resource":       {in: "nvidia.com/mig-3g.40gb", want: MIGProfile{"3g.40gb", 3, 40}, milli: 428},
		"full":           {in: "7g.80gb", want: MIGProfile{"7g.80gb", 7, 80}, milli: 1000},
		"garbage":        {in: "nvidia.com/mig-big", wantErr: "want <slices>g.<memory>gb"},
		"zero slices":    {in: "0g.10gb", wantErr: "slices must be 1..8"},
		"missing memory": {in: "1g.gb", wantErr: "want <slices>g"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseMIGProfile(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || got.Milli() != tc.milli {
				t.Fatalf("got %+v milli %d, want %+v milli %d", got, got.Milli(), tc.want, tc.milli)
			}
			if got.Resource() != "nvidia.com/mig-"+tc.want.Name {
				t.Fatalf("Resource() = %q", got.Resource())
			}
		})
	}
}

func TestJobNameDeterministicAndValid(t *testing.T) {
	tests := map[string]struct {
		dispatch, podSet string
		readable         bool
	}{
		"hub id":       {"d-0123456789abcdef01234567", "workers", true},
		"upper case":   {"D-ABC", "workers", false},
		"long":         {"d-" + strings.Repeat("a", 60), "workers", false},
		"odd chars":    {"d/1:2", "w", false},
		"long podset":  {"d-1", strings.Repeat("p", 50), false},
		"short podset": {"d-1", "a", true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a, b := JobName(tc.dispatch, tc.podSet), JobName(tc.dispatch, tc.podSet)
			if a != b {
				t.Fatalf("not deterministic: %q vs %q", a, b)
			}
			if len(a) > 52 || !dnsLabel.MatchString(a) {
				t.Fatalf("%q is not a short DNS-1123 label", a)
			}
			if readable := strings.Contains(a, tc.dispatch); readable != tc.readable {
				t.Fatalf("%q: readable = %v, want %v", a, readable, tc.readable)
			}
			if other := JobName(tc.dispatch, tc.podSet+"x"); other == a {
				t.Fatalf("different pod sets share the name %q", a)
			}
		})
	}
}

func TestLabelSafe(t *testing.T) {
	if got := labelSafe("wl-01JD3M6Q7ZK4X9V2B8N5T0RCWE"); got != "wl-01JD3M6Q7ZK4X9V2B8N5T0RCWE" {
		t.Fatalf("valid value changed: %q", got)
	}
	bad := labelSafe("a/b")
	if !strings.HasPrefix(bad, "h-") || !idPattern.MatchString(bad) || bad == labelSafe("a/c") {
		t.Fatalf("labelSafe(a/b) = %q: want a distinct valid hash label", bad)
	}
}
