package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"google.golang.org/protobuf/proto"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// quotaMap builds a quotas map value: class -> nominal, borrow, lend
// ("" for null).
func quotaMap(t *testing.T, entries map[string][3]string) types.Map {
	t.Helper()
	elems := map[string]attr.Value{}
	for class, e := range entries {
		v := map[string]attr.Value{}
		for i, name := range []string{"nominal", "borrow_limit", "lend_limit"} {
			if e[i] == "" {
				v[name] = types.StringNull()
			} else {
				v[name] = types.StringValue(e[i])
			}
		}
		elems[class] = types.ObjectValueMust(quotaAttrTypes, v)
	}
	return types.MapValueMust(quotaObjectType, elems)
}

// queue is a builder for queue models in tests.
func queue(p string) *queueModel {
	return &queueModel{
		Path: types.StringValue(p), Parent: types.StringNull(), Weight: types.Int64Value(1), Description: types.StringValue(""),
		Quotas: types.MapNull(quotaObjectType), MaxPriority: types.Int64Null(), AllowNonPreemptible: types.BoolNull(),
		ForceDestroy: types.BoolValue(false), ForceDestroyTimeout: types.StringValue("10m"),
	}
}

func (m *queueModel) withQuotas(t *testing.T, e map[string][3]string) *queueModel {
	m.Quotas = quotaMap(t, e)
	return m
}

// errorsAt returns "path: detail" for each error, for matching.
func errorsAt(d diag.Diagnostics) []string {
	var out []string
	for _, e := range d.Errors() {
		p := ""
		if wp, ok := e.(diag.DiagnosticWithPath); ok {
			p = wp.Path().String()
		}
		out = append(out, p+": "+e.Summary()+": "+e.Detail())
	}
	return out
}

func TestValidateQueueConfig(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		m    *queueModel
		want []string // substrings, one per expected error, in order
	}{
		"valid":            {m: queue("acme/vision").withQuotas(t, map[string][3]string{"nvidia-h100-80gb": {"8", "4", "2500m"}, "*": {"0", "0", ""}})},
		"negative nominal": {m: queue("acme").withQuotas(t, map[string][3]string{"nvidia-h100-80gb": {"-1", "", ""}}), want: []string{`quotas["nvidia-h100-80gb"].nominal: Invalid GPU quantity: quotas["nvidia-h100-80gb"].nominal "-1" is negative`}},
		"malformed borrow": {m: queue("acme").withQuotas(t, map[string][3]string{"a100": {"1", "lots", ""}}), want: []string{`quotas["a100"].borrow_limit: Invalid GPU quantity`}},
		"lend above":       {m: queue("acme").withQuotas(t, map[string][3]string{"a100": {"1", "", "2"}}), want: []string{`quotas["a100"].lend_limit: Lend limit above nominal`}},
		"bad class":        {m: queue("acme").withQuotas(t, map[string][3]string{"NVIDIA H100": {"1", "", ""}}), want: []string{`quotas["NVIDIA H100"]: Invalid accelerator class`}},
		"bad path":         {m: queue("acme/Vision"), want: []string{`path: Invalid queue path`}},
		"deep path":        {m: queue("a/b/c/d"), want: []string{`path: Invalid queue path`}},
		"parent mismatch": {m: func() *queueModel { m := queue("acme/vision"); m.Parent = types.StringValue("other"); return m }(),
			want: []string{`parent: Parent does not match the path: parent is "other" but path "acme/vision" says its parent is "acme"`}},
		"tenant with parent": {m: func() *queueModel { m := queue("acme"); m.Parent = types.StringValue("root"); return m }(),
			want: []string{`a one-segment path is a tenant`}},
		"weight 0": {m: func() *queueModel { m := queue("acme"); m.Weight = types.Int64Value(0); return m }(), want: []string{`weight: Invalid weight`}},
		"priority": {m: func() *queueModel { m := queue("acme"); m.MaxPriority = types.Int64Value(2_000_000); return m }(), want: []string{`max_priority: Invalid priority ceiling`}},
		"timeout":  {m: func() *queueModel { m := queue("acme"); m.ForceDestroyTimeout = types.StringValue("soon"); return m }(), want: []string{`force_destroy_timeout: Invalid timeout`}},
		"unknown skips": {m: func() *queueModel {
			m := queue("acme")
			m.Quotas = types.MapUnknown(quotaObjectType)
			m.Path = types.StringUnknown()
			return m
		}()},
	} {
		t.Run(name, func(t *testing.T) {
			var d diag.Diagnostics
			validateQueueConfig(ctx, tc.m, &d)
			got := errorsAt(d)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d errors %q, want %d", len(got), got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("error %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

func TestQuotaConversionRoundTrip(t *testing.T) {
	ctx := context.Background()
	m := queue("acme/vision").withQuotas(t, map[string][3]string{"nvidia-h100-80gb": {"8", "4", "2500m"}, "a100": {"0.5", "", ""}})
	m.MaxPriority, m.AllowNonPreemptible, m.Weight = types.Int64Value(100), types.BoolValue(false), types.Int64Value(3)
	var d diag.Diagnostics
	spec := queueSpec(ctx, m, &d)
	if d.HasError() {
		t.Fatal(d)
	}
	want := &meridianv1.Queue{Path: "acme/vision", Weight: 3, Quotas: []*meridianv1.QueueQuota{
		{AcceleratorClass: "a100", NominalMilliGpus: 500},
		{AcceleratorClass: "nvidia-h100-80gb", NominalMilliGpus: 8000, BorrowLimitMilli: proto.Int64(4000), LendLimitMilli: proto.Int64(2500)},
	}, SubmitPolicy: &meridianv1.SubmitPolicy{MaxPriority: proto.Int32(100), AllowNonPreemptible: proto.Bool(false)}}
	if !proto.Equal(spec, want) {
		t.Fatalf("queueSpec = %v\nwant %v", spec, want)
	}
	// Back, with the model as prior: the strings stay as written.
	back := *m
	back.Revision = types.Int64Null()
	hub := proto.Clone(spec).(*meridianv1.Queue)
	hub.Revision = 7
	if d := fillQueueModel(ctx, &back, hub); d.HasError() {
		t.Fatal(d)
	}
	if !back.Quotas.Equal(m.Quotas) || back.Revision.ValueInt64() != 7 || back.Parent.ValueString() != "acme" || back.MaxPriority.ValueInt64() != 100 {
		t.Fatalf("fillQueueModel changed what it read back: %+v", back)
	}
	// Without a prior (an import), quantities are canonical.
	imp := queueModel{Quotas: types.MapNull(quotaObjectType)}
	fillQueueModel(ctx, &imp, hub)
	q, _, _ := quotasFromModel(ctx, imp.Quotas)
	if got := q["nvidia-h100-80gb"]; got.LendLimit.ValueString() != "2.5" || got.Nominal.ValueString() != "8" || !q["a100"].BorrowLimit.IsNull() {
		t.Fatalf("imported quotas = %+v", q)
	}
	// A change made elsewhere replaces the prior string.
	hub.Quotas[1].NominalMilliGpus = 12000
	fillQueueModel(ctx, &back, hub)
	q, _, _ = quotasFromModel(ctx, back.Quotas)
	if q["nvidia-h100-80gb"].Nominal.ValueString() != "12" {
		t.Fatalf("drifted nominal = %v, want 12", q["nvidia-h100-80gb"].Nominal)
	}
}

func TestChangedSpecFields(t *testing.T) {
	base := &meridianv1.Queue{Path: "a", Quotas: h100(1000, nil)}
	for name, tc := range map[string]struct {
		cur  *meridianv1.Queue
		want string
	}{
		"same, weight 0 is 1": {cur: &meridianv1.Queue{Path: "a", Weight: 1, Quotas: h100(1000, nil)}, want: ""},
		"access only":         {cur: &meridianv1.Queue{Path: "a", Quotas: h100(1000, nil), Access: []*meridianv1.AccessEntry{{Subject: "user:x"}}, Revision: 9}, want: ""},
		"empty policy":        {cur: &meridianv1.Queue{Path: "a", Quotas: h100(1000, nil), SubmitPolicy: &meridianv1.SubmitPolicy{}}, want: ""},
		"quota":               {cur: &meridianv1.Queue{Path: "a", Quotas: h100(2000, nil)}, want: "quotas"},
		"all": {cur: &meridianv1.Queue{Path: "a", Weight: 2, Description: "d", SubmitPolicy: &meridianv1.SubmitPolicy{MaxPriority: proto.Int32(1)}},
			want: "weight,quotas,description,submit_policy"},
	} {
		if got := strings.Join(changedSpecFields(base, tc.cur), ","); got != tc.want {
			t.Errorf("%s: changedSpecFields = %q, want %q", name, got, tc.want)
		}
	}
}

func TestBorrowAboveParent(t *testing.T) {
	parent := &meridianv1.Queue{Path: "acme", Quotas: []*meridianv1.QueueQuota{
		{AcceleratorClass: "h100", NominalMilliGpus: 8000, BorrowLimitMilli: proto.Int64(0)},
		{AcceleratorClass: "a100", NominalMilliGpus: 8000}, // unlimited borrowing: bounds nothing
		{AcceleratorClass: "*", NominalMilliGpus: 1000, BorrowLimitMilli: proto.Int64(1000)},
	}}
	for name, tc := range map[string]struct {
		q    *meridianv1.QueueQuota
		want string
	}{
		"fits":               {q: &meridianv1.QueueQuota{AcceleratorClass: "h100", NominalMilliGpus: 4000, BorrowLimitMilli: proto.Int64(4000)}},
		"unlimited child":    {q: &meridianv1.QueueQuota{AcceleratorClass: "h100", NominalMilliGpus: 4000}},
		"borrows above":      {q: &meridianv1.QueueQuota{AcceleratorClass: "h100", NominalMilliGpus: 4000, BorrowLimitMilli: proto.Int64(8000)}, want: "borrow_limit: quotas[\"h100\"] lets the queue borrow up to 12 GPUs (nominal 4 + borrow_limit 8) but its parent acme may hold at most 8 GPUs of h100 (nominal 8 + borrow_limit 0). Lower borrow_limit to at most 4."},
		"nominal above":      {q: &meridianv1.QueueQuota{AcceleratorClass: "h100", NominalMilliGpus: 9000}, want: "nominal: quotas[\"h100\"].nominal is 9 GPUs"},
		"parent unlimited":   {q: &meridianv1.QueueQuota{AcceleratorClass: "a100", NominalMilliGpus: 9000, BorrowLimitMilli: proto.Int64(90000)}},
		"parent's * entry":   {q: &meridianv1.QueueQuota{AcceleratorClass: "l40s", NominalMilliGpus: 1000, BorrowLimitMilli: proto.Int64(1500)}, want: "borrow_limit: quotas[\"l40s\"] lets the queue borrow up to 2.5 GPUs"},
		"class parent lacks": {q: &meridianv1.QueueQuota{AcceleratorClass: "t4", NominalMilliGpus: 1000}, want: ""},
	} {
		if name == "class parent lacks" {
			// With a "*" entry the parent bounds every class; drop it here.
			p := proto.Clone(parent).(*meridianv1.Queue)
			p.Quotas = p.Quotas[:2]
			if v := borrowAboveParent(&meridianv1.Queue{Path: "acme/x", Quotas: []*meridianv1.QueueQuota{tc.q}}, p); len(v) != 0 {
				t.Errorf("%s: %v, want none", name, v)
			}
			continue
		}
		v := borrowAboveParent(&meridianv1.Queue{Path: "acme/x", Quotas: []*meridianv1.QueueQuota{tc.q}}, parent)
		got := ""
		if len(v) > 0 {
			got = v[0].field + ": " + v[0].msg
		}
		if (tc.want == "") != (got == "") || !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: got %q, want %q", name, got, tc.want)
		}
	}
}

func TestQueueFieldsMapping(t *testing.T) {
	f := queueFields([]string{"a100", "h100"})
	for hub, want := range map[string]string{
		"queue.quotas[1].borrow_limit_milli": `quotas["h100"].borrow_limit`,
		"quotas[0].nominal_milli_gpus":       `quotas["a100"].nominal`,
		"quotas[0].accelerator_class":        `quotas["a100"]`,
		"weight":                             "weight",
		"submit_policy.max_priority":         "max_priority",
		"quotas[5].nominal_milli_gpus":       "",
		"status":                             "",
	} {
		p, _, ok := f(hub)
		got := ""
		if ok {
			got = p.String()
		}
		if got != want {
			t.Errorf("%s -> %q, want %q", hub, got, want)
		}
	}
	_ = path.Root
}

func TestImportIDs(t *testing.T) {
	if p, err := parseQueueImportID(" /acme/vision/ "); err != nil || p != "acme/vision" {
		t.Errorf("parseQueueImportID = %q, %v", p, err)
	}
	for _, bad := range []string{"", "Acme", "a/b/c/d", "a//b"} {
		if _, err := parseQueueImportID(bad); err == nil {
			t.Errorf("parseQueueImportID(%q) accepted it", bad)
		}
	}
	if err := checkTokenImportID("abcd1234efgh5678"); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"", "mrd_abcd_secretsecret", "a b", "x/y"} {
		err := checkTokenImportID(bad)
		if err == nil {
			t.Errorf("checkTokenImportID(%q) accepted it", bad)
		} else if bad != "" && strings.Contains(err.Error(), bad) {
			t.Errorf("checkTokenImportID(%q) echoes the input: %v", bad, err)
		}
	}
}

func FuzzImportIDs(f *testing.F) {
	for _, s := range []string{"acme/vision", "/a/", "mrd_x_y", "tk01", "a//b", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if p, err := parseQueueImportID(id); err == nil {
			if q, err := parseQueueImportID(p); err != nil || q != p {
				t.Fatalf("parseQueueImportID is not idempotent on %q: %q, %v", p, q, err)
			}
		}
		if err := checkTokenImportID(id); err == nil && (id == "" || strings.HasPrefix(id, "mrd_")) {
			t.Fatalf("checkTokenImportID(%q) accepted it", id)
		}
	})
}

func TestConnSettingsCheck(t *testing.T) {
	for name, tc := range map[string]struct {
		s    connSettings
		want string
	}{
		"loopback plaintext": {s: connSettings{endpoint: "127.0.0.1:7070", token: "t"}},
		"remote plaintext":   {s: connSettings{endpoint: "hub.example.com:7070", token: "t"}, want: "refusing to send the token over plaintext"},
		"remote tls":         {s: connSettings{endpoint: "hub.example.com:7070", token: "t", tls: true}},
		"url":                {s: connSettings{endpoint: "https://hub:7070"}, want: "is a URL"},
		"both cas":           {s: connSettings{endpoint: "h:1", caFile: "a", caPEM: "b"}, want: "both set"},
	} {
		err := tc.s.check()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
	if _, err := (connSettings{caPEM: "not pem"}).tlsConfig(); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("tlsConfig with a bad PEM: %v", err)
	}
}

func TestCheckSubject(t *testing.T) {
	for s, ok := range map[string]bool{"user:alice": true, "group:dex:ml": true, "token:abc": true, "alice": false, "robot:x": false, "user:": false, "user: x": false} {
		if err := checkSubject(s); (err == nil) != ok {
			t.Errorf("checkSubject(%q) = %v", s, err)
		}
	}
}

func TestClassSuggest(t *testing.T) {
	c := classSet{names: []string{"nvidia-a100-80gb", "nvidia-h100-80gb"}}
	if got := c.suggest("nvidia-h100-80g"); !strings.Contains(got, "nvidia-h100-80gb") {
		t.Errorf("suggest = %q", got)
	}
	if got := c.suggest("tpu-v5"); got != "" {
		t.Errorf("suggest for something unrelated = %q", got)
	}
	if !c.has("nvidia-a100-80gb") || c.has("x") {
		t.Error("has")
	}
}
