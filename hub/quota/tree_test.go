package quota

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestNewTreeRejectsBadSpecs(t *testing.T) {
	ok := queue("t/a").quota(h100, 1, 0, 0).obj()
	tests := map[string]struct {
		specs      []QueueSpec
		wantField  string
		wantReason string
	}{
		"empty path":            {[]QueueSpec{{Path: ""}}, "queues[0].path", "must not be empty"},
		"uppercase segment":     {[]QueueSpec{{Path: "Research"}}, "queues[0].path", "must match"},
		"four segments":         {[]QueueSpec{{Path: "a/b/c/d"}}, "queues[0].path", "at most 3"},
		"segment ends with -":   {[]QueueSpec{{Path: "a/b-"}}, "queues[0].path", "segment 2"},
		"segment too long":      {[]QueueSpec{{Path: strings.Repeat("x", 64)}}, "queues[0].path", "at most 63"},
		"empty segment":         {[]QueueSpec{{Path: "a//b"}}, "queues[0].path", "is empty"},
		"leading slash":         {[]QueueSpec{{Path: "/a"}}, "queues[0].path", "is empty"},
		"duplicate path":        {[]QueueSpec{ok, ok}, "queues[1].path", "duplicates queues[0].path"},
		"negative weight":       {[]QueueSpec{{Path: "a", Weight: -1}}, "queues[0].weight", "> 0"},
		"NaN weight":            {[]QueueSpec{{Path: "a", Weight: math.NaN()}}, "queues[0].weight", "finite"},
		"infinite weight":       {[]QueueSpec{{Path: "a", Weight: math.Inf(1)}}, "queues[0].weight", "finite"},
		"negative nominal":      {[]QueueSpec{ok, queue("t/b").limits(h100, Limits{Nominal: -5}).obj()}, `queues[1].limits["nvidia-h100"].nominal`, "must be >= 0, got -5"},
		"nominal too large":     {[]QueueSpec{queue("a").limits(h100, Limits{Nominal: MaxMilli + 1}).obj()}, `queues[0].limits["nvidia-h100"].nominal`, "must be <="},
		"borrow limit below -1": {[]QueueSpec{queue("a").limits(h100, Limits{BorrowLimit: -2}).obj()}, `queues[0].limits["nvidia-h100"].borrowLimit`, "-1 for unlimited"},
		"borrow limit too big":  {[]QueueSpec{queue("a").limits(h100, Limits{BorrowLimit: MaxMilli + 1}).obj()}, `queues[0].limits["nvidia-h100"].borrowLimit`, "must be <="},
		"lend limit below -1":   {[]QueueSpec{queue("a").limits(h100, Limits{LendLimit: -5}).obj()}, `queues[0].limits["nvidia-h100"].lendLimit`, "got -5"},
		"empty class":           {[]QueueSpec{queue("a").limits("", Limits{}).obj()}, `queues[0].limits[""]`, "must not be empty"},
		"class with a space":    {[]QueueSpec{queue("a").limits("nvidia h100", Limits{}).obj()}, `queues[0].limits["nvidia h100"]`, "letters, digits"},
		"unbacked reserve": {[]QueueSpec{queue("t").quota(h100, 2, unl, unl).obj(), queue("t/a").quota(h100, 4, 0, 1).obj()},
			`queues[0].limits["nvidia-h100"].nominal`, "at least the 3 GPUs its sub-queues reserve"},
		"unbacked reserve via star": {[]QueueSpec{queue("t/a").quota(AnyClass, 1, 0, 0).obj(), queue("t").quota(AnyClass, 0.5, unl, unl).obj()},
			`queues[1].limits["*"].nominal`, "at least the 1 GPUs"},
		"class too long": {[]QueueSpec{queue("a").limits(strings.Repeat("c", 64), Limits{}).obj()}, `queues[0].limits["` + strings.Repeat("c", 64) + `"]`, "at most 63"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tree, err := NewTree(tc.specs)
			if err == nil {
				t.Fatalf("NewTree accepted bad specs, got tree with %v", tree.Queues())
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FieldError", err)
			}
			if fe.Field != tc.wantField {
				t.Errorf("field = %q, want %q (error: %v)", fe.Field, tc.wantField, err)
			}
			if !strings.Contains(fe.Reason, tc.wantReason) {
				t.Errorf("reason = %q, want it to contain %q", fe.Reason, tc.wantReason)
			}
			if !IsInvalidSpec(err) {
				t.Errorf("IsInvalidSpec(%v) = false", err)
			}
			if !strings.HasPrefix(err.Error(), tc.wantField+": ") {
				t.Errorf("error text %q does not start with the field", err.Error())
			}
		})
	}
}

func TestNewTreeStructure(t *testing.T) {
	tree := mustTree(t,
		queue("research/vision/detr").quota(h100, 4, unl, unl).weight(3),
		queue("research/nlp").quota(h100, 2, 0, 0),
		queue("infra").quota(AnyClass, 1, 0, 0),
		queue("research").weight(2),
	)
	wantQueues := []string{"infra", "research", "research/nlp", "research/vision", "research/vision/detr"}
	if got := tree.Queues(); !reflect.DeepEqual(got, wantQueues) {
		t.Errorf("Queues() = %v, want %v", got, wantQueues)
	}
	if got, want := tree.Leaves(), []string{"infra", "research/nlp", "research/vision/detr"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Leaves() = %v, want %v", got, want)
	}
	leafTests := map[string]bool{"infra": true, "research": false, "research/vision": false, "research/vision/detr": true, "": false, "nope": false}
	for p, want := range leafTests {
		if got := tree.Leaf(p); got != want {
			t.Errorf("Leaf(%q) = %v, want %v", p, got, want)
		}
	}
	weights := map[string]float64{"research": 2, "research/vision": 1, "research/vision/detr": 3, "infra": 1, "nope": 0}
	for p, want := range weights {
		if got := tree.Weight(p); got != want {
			t.Errorf("Weight(%q) = %v, want %v", p, got, want)
		}
	}
	limitTests := map[string]struct {
		path, class string
		want        Limits
	}{
		"explicit leaf":                  {"research/nlp", h100, limGPU(2, 0, 0)},
		"leaf without entry has nothing": {"research/nlp", t4, Limits{}},
		"star entry applies":             {"infra", t4, limGPU(1, 0, 0)},
		"implicit team aggregates":       {"research/vision", h100, limGPU(4, unl, unl)},
		"tenant without entry sums":      {"research", h100, limGPU(6, unl, unl)},
		"root is the federation":         {"", h100, limGPU(7, 0, unl)}, // research 6 + infra "*" 1
		"root for an unlisted class":     {"", t4, limGPU(1, 0, unl)},
	}
	for name, tc := range limitTests {
		got, ok := tree.Limits(tc.path, tc.class)
		if !ok || got != tc.want {
			t.Errorf("%s: Limits(%q, %q) = %+v, %v; want %+v", name, tc.path, tc.class, got, ok, tc.want)
		}
		if n := tree.Nominal(tc.path, tc.class); n != tc.want.Nominal {
			t.Errorf("%s: Nominal = %d, want %d", name, n, tc.want.Nominal)
		}
	}
	if _, ok := tree.Limits("nope", h100); ok {
		t.Errorf("Limits of an unknown queue reported ok")
	}
	if p, ok := tree.Parent("research/vision/detr"); !ok || p != "research/vision" {
		t.Errorf("Parent = %q, %v", p, ok)
	}
	if got, want := tree.Children(""), []string{"infra", "research"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Children(root) = %v, want %v", got, want)
	}
}

func TestEmptyTree(t *testing.T) {
	tree, err := NewTree(nil)
	if err != nil {
		t.Fatalf("NewTree(nil): %v", err)
	}
	if len(tree.Queues()) != 0 || tree.Check("a", h100, 1).OK {
		t.Fatalf("empty tree has queues %v or admits work", tree.Queues())
	}
	if got := FairTree(tree, nil, epoch); len(got) != 0 {
		t.Fatalf("FairTree of an empty tree = %v", got)
	}
}

func TestParseSpecsJSON(t *testing.T) {
	tests := map[string]struct {
		in        string
		want      []QueueSpec
		wantError string
	}{
		"omitted limits are unlimited": {
			in:   `[{"path":"t/a","weight":2,"limits":{"nvidia-h100":{"nominal":4000}}}]`,
			want: []QueueSpec{{Path: "t/a", Weight: 2, Limits: map[string]Limits{h100: {Nominal: 4000, BorrowLimit: Unlimited, LendLimit: Unlimited}}}},
		},
		"explicit zero limits stay zero": {
			in:   `[{"path":"t","limits":{"*":{"nominal":1,"borrowLimit":0,"lendLimit":0}}}]`,
			want: []QueueSpec{{Path: "t", Limits: map[string]Limits{AnyClass: {Nominal: 1}}}},
		},
		"unknown field":      {in: `[{"path":"t","wieght":2}]`, wantError: "unknown field"},
		"invalid spec":       {in: `[{"path":"T"}]`, wantError: "queues[0].path"},
		"trailing data":      {in: `[] []`, wantError: "unexpected data"},
		"not an array":       {in: `{"path":"t"}`, wantError: "queues:"},
		"negative in limits": {in: `[{"path":"t","limits":{"x":{"nominal":-1}}}]`, wantError: `queues[0].limits["x"].nominal`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseSpecsJSON([]byte(tc.in))
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSpecsJSON: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestGPUs(t *testing.T) {
	tests := map[string]struct {
		milli int64
		want  string
	}{
		"whole":      {64000, "64"},
		"half":       {12500, "12.5"},
		"thousandth": {1, "0.001"},
		"eighth":     {125, "0.125"},
		"zero":       {0, "0"},
		"negative":   {-1500, "-1.5"},
		"tens":       {10010, "10.01"},
	}
	for name, tc := range tests {
		if got := GPUs(tc.milli); got != tc.want {
			t.Errorf("%s: GPUs(%d) = %q, want %q", name, tc.milli, got, tc.want)
		}
	}
}
