package provider

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"google.golang.org/protobuf/proto"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"github.com/meridian-gpu/meridian/terraform/internal/quantity"
)

// queueModel is meridian_queue's state and plan.
type queueModel struct {
	ID                  types.String `tfsdk:"id"`
	Path                types.String `tfsdk:"path"`
	Parent              types.String `tfsdk:"parent"`
	Weight              types.Int64  `tfsdk:"weight"`
	Description         types.String `tfsdk:"description"`
	Quotas              types.Map    `tfsdk:"quotas"`
	MaxPriority         types.Int64  `tfsdk:"max_priority"`
	AllowNonPreemptible types.Bool   `tfsdk:"allow_non_preemptible"`
	ForceDestroy        types.Bool   `tfsdk:"force_destroy"`
	ForceDestroyTimeout types.String `tfsdk:"force_destroy_timeout"`
	Revision            types.Int64  `tfsdk:"revision"`
}

// quotaModel is one entry of a queue's quotas map, keyed by class.
type quotaModel struct {
	Nominal     types.String `tfsdk:"nominal"`
	BorrowLimit types.String `tfsdk:"borrow_limit"`
	LendLimit   types.String `tfsdk:"lend_limit"`
}

var quotaAttrTypes = map[string]attr.Type{
	"nominal":      types.StringType,
	"borrow_limit": types.StringType,
	"lend_limit":   types.StringType,
}

var quotaObjectType = types.ObjectType{AttrTypes: quotaAttrTypes}

// defaultWeight is what the hub means by weight 0.
const defaultWeight = 1

// parentOf returns the parent path of a queue path, "" for a tenant.
func parentOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i > 0 {
		return p[:i]
	}
	return ""
}

// quotaAttr is the attribute path of one quota field.
func quotaAttr(class, field string) path.Path {
	return path.Root("quotas").AtMapKey(class).AtName(field)
}

// quotasFromModel reads the quotas map; nil with no error when it is null
// or unknown (known false then).
func quotasFromModel(ctx context.Context, m types.Map) (map[string]quotaModel, bool, diag.Diagnostics) {
	if m.IsNull() || m.IsUnknown() {
		return nil, !m.IsUnknown(), nil
	}
	out := map[string]quotaModel{}
	diags := m.ElementsAs(ctx, &out, false)
	return out, true, diags
}

// parseQuantity parses one quota quantity, adding an error at p when it
// is malformed; null means unset (ok, -1).
func parseQuantity(v types.String, p path.Path, name string, diags *diag.Diagnostics) (int64, bool) {
	if v.IsNull() || v.IsUnknown() {
		return -1, true
	}
	n, err := quantity.Parse(v.ValueString())
	if err != nil {
		diags.AddAttributeError(p, "Invalid GPU quantity", fmt.Sprintf("%s %s", name, err))
		return 0, false
	}
	return n, true
}

// quotasToProto converts the quotas map to the hub's list, sorted by class,
// adding one diagnostic per malformed or inconsistent quantity.
func quotasToProto(q map[string]quotaModel, diags *diag.Diagnostics) []*meridianv1.QueueQuota {
	var out []*meridianv1.QueueQuota
	for _, class := range slices.Sorted(maps.Keys(q)) {
		e := q[class]
		name := func(f string) string { return fmt.Sprintf("quotas[%q].%s", class, f) }
		nom, ok1 := parseQuantity(e.Nominal, quotaAttr(class, "nominal"), name("nominal"), diags)
		bor, ok2 := parseQuantity(e.BorrowLimit, quotaAttr(class, "borrow_limit"), name("borrow_limit"), diags)
		lend, ok3 := parseQuantity(e.LendLimit, quotaAttr(class, "lend_limit"), name("lend_limit"), diags)
		if !ok1 || !ok2 || !ok3 {
			continue
		}
		pq := &meridianv1.QueueQuota{AcceleratorClass: class, NominalMilliGpus: max(nom, 0)}
		if bor >= 0 {
			pq.BorrowLimitMilli = proto.Int64(bor)
		}
		if lend >= 0 {
			if nom >= 0 && lend > nom {
				diags.AddAttributeError(quotaAttr(class, "lend_limit"), "Lend limit above nominal",
					fmt.Sprintf("%s (%s GPUs) must not exceed %s (%s GPUs): a queue can lend only what it has", name("lend_limit"), quantity.Format(lend), name("nominal"), quantity.Format(nom)))
				continue
			}
			pq.LendLimitMilli = proto.Int64(lend)
		}
		out = append(out, pq)
	}
	return out
}

// queueSpec is the part of a queue that meridian_queue owns, as the hub
// stores it.
func queueSpec(ctx context.Context, m *queueModel, diags *diag.Diagnostics) *meridianv1.Queue {
	q := &meridianv1.Queue{
		Path:        m.Path.ValueString(),
		Weight:      int32(m.Weight.ValueInt64()),
		Description: m.Description.ValueString(),
	}
	quotas, _, d := quotasFromModel(ctx, m.Quotas)
	diags.Append(d...)
	q.Quotas = quotasToProto(quotas, diags)
	if !m.MaxPriority.IsNull() || !m.AllowNonPreemptible.IsNull() {
		q.SubmitPolicy = &meridianv1.SubmitPolicy{}
		if !m.MaxPriority.IsNull() {
			q.SubmitPolicy.MaxPriority = proto.Int32(int32(m.MaxPriority.ValueInt64()))
		}
		if !m.AllowNonPreemptible.IsNull() {
			q.SubmitPolicy.AllowNonPreemptible = proto.Bool(m.AllowNonPreemptible.ValueBool())
		}
	}
	return q
}

// normalizedSpec is a queue's owned fields in a comparable form: weight 0
// read as 1, quotas sorted, an empty submit policy as none.
func normalizedSpec(q *meridianv1.Queue) *meridianv1.Queue {
	n := &meridianv1.Queue{Path: q.GetPath(), Weight: q.GetWeight(), Description: q.GetDescription()}
	if n.Weight == 0 {
		n.Weight = defaultWeight
	}
	for _, qq := range q.GetQuotas() {
		n.Quotas = append(n.Quotas, proto.Clone(qq).(*meridianv1.QueueQuota))
	}
	slices.SortFunc(n.Quotas, func(a, b *meridianv1.QueueQuota) int {
		return strings.Compare(a.GetAcceleratorClass(), b.GetAcceleratorClass())
	})
	if sp := q.GetSubmitPolicy(); sp != nil && (sp.MaxPriority != nil || sp.AllowNonPreemptible != nil) {
		n.SubmitPolicy = proto.Clone(sp).(*meridianv1.SubmitPolicy)
	}
	return n
}

// changedSpecFields lists the update_mask paths where two specs differ.
func changedSpecFields(old, cur *meridianv1.Queue) []string {
	a, b := normalizedSpec(old), normalizedSpec(cur)
	var out []string
	if a.Weight != b.Weight {
		out = append(out, "weight")
	}
	if !quotasEqual(a.Quotas, b.Quotas) {
		out = append(out, "quotas")
	}
	if a.Description != b.Description {
		out = append(out, "description")
	}
	if !proto.Equal(a.SubmitPolicy, b.SubmitPolicy) {
		out = append(out, "submit_policy")
	}
	return out
}

func quotasEqual(a, b []*meridianv1.QueueQuota) bool {
	return slices.EqualFunc(a, b, func(x, y *meridianv1.QueueQuota) bool { return proto.Equal(x, y) })
}

// keepString returns prior when it means the same quantity as milli (so
// that "2500m" written in HCL is not rewritten as "2.5"), else the
// canonical form.
func keepString(prior types.String, milli int64) types.String {
	if !prior.IsNull() && !prior.IsUnknown() {
		if n, err := quantity.Parse(prior.ValueString()); err == nil && n == milli {
			return prior
		}
	}
	return types.StringValue(quantity.Format(milli))
}

// quotasToModel converts the hub's quotas to the map, keeping the prior
// strings where they mean the same. An empty list is null, unless the
// prior value was an empty map.
func quotasToModel(ctx context.Context, qs []*meridianv1.QueueQuota, prior types.Map) (types.Map, diag.Diagnostics) {
	if len(qs) == 0 {
		if !prior.IsNull() && !prior.IsUnknown() && len(prior.Elements()) == 0 {
			return prior, nil
		}
		return types.MapNull(quotaObjectType), nil
	}
	old, _, _ := quotasFromModel(ctx, prior)
	elems := map[string]attr.Value{}
	var diags diag.Diagnostics
	for _, qq := range qs {
		p := old[qq.GetAcceleratorClass()]
		e := quotaModel{
			Nominal:     keepString(p.Nominal, qq.GetNominalMilliGpus()),
			BorrowLimit: types.StringNull(),
			LendLimit:   types.StringNull(),
		}
		if qq.BorrowLimitMilli != nil {
			e.BorrowLimit = keepString(p.BorrowLimit, qq.GetBorrowLimitMilli())
		}
		if qq.LendLimitMilli != nil {
			e.LendLimit = keepString(p.LendLimit, qq.GetLendLimitMilli())
		}
		v, d := types.ObjectValueFrom(ctx, quotaAttrTypes, e)
		diags.Append(d...)
		elems[qq.GetAcceleratorClass()] = v
	}
	m, d := types.MapValue(quotaObjectType, elems)
	diags.Append(d...)
	return m, diags
}

// fillQueueModel sets m's hub-owned attributes from q; m's other
// attributes (force_destroy and its timeout) are left as they are.
func fillQueueModel(ctx context.Context, m *queueModel, q *meridianv1.Queue) diag.Diagnostics {
	m.ID = types.StringValue(q.GetPath())
	m.Path = types.StringValue(q.GetPath())
	m.Parent = types.StringValue(parentOf(q.GetPath()))
	w := int64(q.GetWeight())
	if w == 0 {
		w = defaultWeight
	}
	m.Weight = types.Int64Value(w)
	m.Description = types.StringValue(q.GetDescription())
	quotas, diags := quotasToModel(ctx, q.GetQuotas(), m.Quotas)
	m.Quotas = quotas
	sp := q.GetSubmitPolicy()
	m.MaxPriority = types.Int64Null()
	if sp != nil && sp.MaxPriority != nil {
		m.MaxPriority = types.Int64Value(int64(sp.GetMaxPriority()))
	}
	m.AllowNonPreemptible = types.BoolNull()
	if sp != nil && sp.AllowNonPreemptible != nil {
		m.AllowNonPreemptible = types.BoolValue(sp.GetAllowNonPreemptible())
	}
	m.Revision = types.Int64Value(q.GetRevision())
	if m.ForceDestroy.IsNull() || m.ForceDestroy.IsUnknown() {
		m.ForceDestroy = types.BoolValue(false)
	}
	if m.ForceDestroyTimeout.IsNull() || m.ForceDestroyTimeout.IsUnknown() {
		m.ForceDestroyTimeout = types.StringValue(defaultForceDestroyTimeout)
	}
	return diags
}

// quotaFieldRE matches the hub's quota field paths, "quotas[2].lend_limit_milli".
var quotaFieldRE = regexp.MustCompile(`^quotas\[(\d+)\](?:\.(\w+))?$`)

// queueFields maps the hub's field paths in a queue request to attribute
// paths; classes is the request's quotas in order.
func queueFields(classes []string) func(string) (path.Path, string, bool) {
	return func(f string) (path.Path, string, bool) {
		f = strings.TrimPrefix(f, "queue.")
		if m := quotaFieldRE.FindStringSubmatch(f); m != nil {
			i, _ := strconv.Atoi(m[1])
			if i >= len(classes) {
				return path.Empty(), "", false
			}
			attrName := map[string]string{"nominal_milli_gpus": "nominal", "borrow_limit_milli": "borrow_limit", "lend_limit_milli": "lend_limit"}[m[2]]
			if attrName == "" {
				return path.Root("quotas").AtMapKey(classes[i]), fmt.Sprintf("quotas[%q]", classes[i]), true
			}
			return quotaAttr(classes[i], attrName), fmt.Sprintf("quotas[%q].%s", classes[i], attrName), true
		}
		switch f {
		case "path", "weight", "description", "revision":
			return path.Root(f), f, true
		case "submit_policy.max_priority":
			return path.Root("max_priority"), "max_priority", true
		case "submit_policy.allow_non_preemptible":
			return path.Root("allow_non_preemptible"), "allow_non_preemptible", true
		}
		return path.Empty(), "", false
	}
}

func classesOf(q *meridianv1.Queue) []string {
	var out []string
	for _, qq := range q.GetQuotas() {
		out = append(out, qq.GetAcceleratorClass())
	}
	return out
}
