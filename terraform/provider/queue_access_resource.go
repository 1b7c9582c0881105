package provider

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// queueVerbs are the verbs an access entry may grant (docs/security.md).
var queueVerbs = []string{"view", "submit", "cancel", "update", "manage"}

type queueAccessResource struct{ hub *hubClient }

var (
	_ resource.ResourceWithConfigure      = (*queueAccessResource)(nil)
	_ resource.ResourceWithImportState    = (*queueAccessResource)(nil)
	_ resource.ResourceWithValidateConfig = (*queueAccessResource)(nil)
)

func newQueueAccessResource() resource.Resource { return &queueAccessResource{} }

type queueAccessModel struct {
	ID      types.String `tfsdk:"id"`
	Queue   types.String `tfsdk:"queue"`
	Entries types.Set    `tfsdk:"entry"`
}

type accessEntryModel struct {
	Subject types.String `tfsdk:"subject"`
	Verbs   types.Set    `tfsdk:"verbs"`
}

var accessEntryAttrTypes = map[string]attr.Type{"subject": types.StringType, "verbs": types.SetType{ElemType: types.StringType}}
var accessEntryType = types.ObjectType{AttrTypes: accessEntryAttrTypes}

func (r *queueAccessResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_queue_access"
}

func (r *queueAccessResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.hub = clientFrom(req.ProviderData, &resp.Diagnostics)
}

func (r *queueAccessResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "The access list of one queue: who may do what on the queue and every queue below it. " +
			"This resource owns the queue's whole `access` field: entries added outside Terraform show up as a diff and are removed " +
			"on the next apply, and destroying the resource empties the list. Use one per queue. An apply that finds the list changed since " +
			"the plan read it stops rather than overwrite the change. Changing an access list needs " +
			"`manage` on the queue or an ancestor (docs/security.md).",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed: true, MarkdownDescription: "The queue's path.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"queue": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "Path of the queue, for example `meridian_queue.vision.path`. Changing it replaces the resource.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"entry": schema.SetNestedAttribute{
				Required:            true,
				MarkdownDescription: "The grants: one per subject.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"subject": schema.StringAttribute{
						Required:            true,
						MarkdownDescription: "`user:NAME`, `group:NAME` or `token:ID` (an API token, for example `\"token:${meridian_api_token.ci.id}\"`).",
					},
					"verbs": schema.SetAttribute{
						Required: true, ElementType: types.StringType,
						MarkdownDescription: "Any of `view`, `submit`, `cancel`, `update`, `manage` (`manage` implies the others and covers the child queues and this list).",
					},
				}},
			},
		},
	}
}

func (r *queueAccessResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m queueAccessModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.Entries.IsUnknown() || m.Entries.IsNull() {
		return
	}
	if !m.Queue.IsUnknown() && !m.Queue.IsNull() {
		if _, err := parseQueueImportID(m.Queue.ValueString()); err != nil || m.Queue.ValueString() != strings.Trim(m.Queue.ValueString(), "/ ") {
			resp.Diagnostics.AddAttributeError(path.Root("queue"), "Invalid queue path", fmt.Sprintf("queue %q: %v", m.Queue.ValueString(), err))
		}
	}
	var entries []accessEntryModel
	resp.Diagnostics.Append(m.Entries.ElementsAs(ctx, &entries, true)...)
	seen := map[string]bool{}
	for _, e := range entries {
		if e.Subject.IsUnknown() {
			continue
		}
		s := e.Subject.ValueString()
		p := path.Root("entry")
		if err := checkSubject(s); err != nil {
			resp.Diagnostics.AddAttributeError(p, "Invalid access subject", fmt.Sprintf("entry subject %q: %v", s, err))
		}
		if seen[s] {
			resp.Diagnostics.AddAttributeError(p, "Duplicate access subject", fmt.Sprintf("entry subject %q appears twice; give each subject one entry with all its verbs", s))
		}
		seen[s] = true
		if e.Verbs.IsUnknown() {
			continue
		}
		var verbs []string
		resp.Diagnostics.Append(e.Verbs.ElementsAs(ctx, &verbs, true)...)
		if len(verbs) == 0 {
			resp.Diagnostics.AddAttributeError(p, "No verbs", fmt.Sprintf("entry %q grants no verbs; give at least one of %s", s, strings.Join(queueVerbs, ", ")))
		}
		for _, v := range verbs {
			if !slices.Contains(queueVerbs, v) {
				resp.Diagnostics.AddAttributeError(p, "Unknown verb", fmt.Sprintf("entry %q: verb %q is not one of %s", s, v, strings.Join(queueVerbs, ", ")))
			}
		}
	}
}

// checkSubject checks an access subject's form.
func checkSubject(s string) error {
	kind, name, ok := strings.Cut(s, ":")
	if !ok || name == "" || strings.TrimSpace(name) != name {
		return fmt.Errorf("must be user:NAME, group:NAME or token:ID")
	}
	switch kind {
	case "user", "group", "token":
		return nil
	}
	return fmt.Errorf("kind %q is not user, group or token", kind)
}

// accessToProto converts the entries, sorted by subject, verbs sorted.
func accessToProto(ctx context.Context, set types.Set, diags *diag.Diagnostics) []*meridianv1.AccessEntry {
	var entries []accessEntryModel
	diags.Append(set.ElementsAs(ctx, &entries, false)...)
	var out []*meridianv1.AccessEntry
	for _, e := range entries {
		var verbs []string
		diags.Append(e.Verbs.ElementsAs(ctx, &verbs, false)...)
		slices.Sort(verbs)
		out = append(out, &meridianv1.AccessEntry{Subject: e.Subject.ValueString(), Verbs: verbs})
	}
	slices.SortFunc(out, func(a, b *meridianv1.AccessEntry) int { return strings.Compare(a.GetSubject(), b.GetSubject()) })
	return out
}

func accessToModel(ctx context.Context, acl []*meridianv1.AccessEntry) (types.Set, diag.Diagnostics) {
	var diags diag.Diagnostics
	var elems []attr.Value
	for _, e := range acl {
		verbs, d := types.SetValueFrom(ctx, types.StringType, e.GetVerbs())
		diags.Append(d...)
		v, d := types.ObjectValue(accessEntryAttrTypes, map[string]attr.Value{"subject": types.StringValue(e.GetSubject()), "verbs": verbs})
		diags.Append(d...)
		elems = append(elems, v)
	}
	s, d := types.SetValue(accessEntryType, elems)
	diags.Append(d...)
	return s, diags
}

func accessEqual(a, b []*meridianv1.AccessEntry) bool {
	norm := func(in []*meridianv1.AccessEntry) []*meridianv1.AccessEntry {
		out := make([]*meridianv1.AccessEntry, 0, len(in))
		for _, e := range in {
			c := proto.Clone(e).(*meridianv1.AccessEntry)
			slices.Sort(c.Verbs)
			out = append(out, c)
		}
		slices.SortFunc(out, func(x, y *meridianv1.AccessEntry) int { return strings.Compare(x.GetSubject(), y.GetSubject()) })
		return out
	}
	return slices.EqualFunc(norm(a), norm(b), func(x, y *meridianv1.AccessEntry) bool { return proto.Equal(x, y) })
}

// write sets the queue's access list. With check, it first makes sure
// the list is still what Terraform last saw (seen), and stops with an
// error naming the change when it is not; the write itself is
// conditional on the revision of that read, so an edit landing in
// between is caught too (then it reads again).
func (r *queueAccessResource) write(ctx context.Context, queue string, acl, seen []*meridianv1.AccessEntry, check bool, diags *diag.Diagnostics) *meridianv1.Queue {
	a := about{typ: "meridian_queue_access", id: queue, field: func(f string) (path.Path, string, bool) {
		if strings.HasPrefix(strings.TrimPrefix(f, "queue."), "access") {
			return path.Root("entry"), "entry", true
		}
		return path.Empty(), "", false
	}}
	for attempt := 0; attempt < maxWriteAttempts; attempt++ {
		cur, err := r.hub.queues.GetQueue(ctx, &meridianv1.GetQueueRequest{Path: queue})
		if err != nil {
			addErr(diags, r.hub, a, "read the queue", err)
			return nil
		}
		if check && !accessEqual(cur.GetAccess(), seen) {
			diags.AddAttributeError(path.Root("entry"), fmt.Sprintf("%s: changed outside Terraform", a),
				fmt.Sprintf("the access list of queue %s was changed by someone else since Terraform last read it, so this apply stopped rather than overwrite that change. "+
					"Run terraform plan again: it shows the list as it is now and what the apply would change.", queue))
			return nil
		}
		var q *meridianv1.Queue
		err = retryAborted(ctx, func() (err error) {
			q, err = r.hub.queues.UpdateQueue(ctx, &meridianv1.UpdateQueueRequest{
				Queue:      &meridianv1.Queue{Path: queue, Access: acl, Revision: cur.GetRevision()},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"access"}},
			})
			return err
		})
		if isRevisionConflict(err) {
			continue // the queue moved between the read and the write: look again
		}
		if err != nil {
			addErr(diags, r.hub, a, "set the access list", err)
			return nil
		}
		return q
	}
	diags.AddError(fmt.Sprintf("%s: set the access list failed: conflict", a), fmt.Sprintf("queue %s kept changing while the provider tried to set its access list; run the apply again.", queue))
	return nil
}

// maxWriteAttempts bounds read-compare-write loops against a queue that
// keeps changing.
const maxWriteAttempts = 3

func (r *queueAccessResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan queueAccessModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	acl := accessToProto(ctx, plan.Entries, &resp.Diagnostics)
	if r.write(ctx, plan.Queue.ValueString(), acl, nil, false, &resp.Diagnostics) == nil {
		return
	}
	plan.ID = plan.Queue
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *queueAccessResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state queueAccessModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	q, err := r.hub.queues.GetQueue(ctx, &meridianv1.GetQueueRequest{Path: state.Queue.ValueString()})
	if status.Code(err) == codes.NotFound {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addErr(&resp.Diagnostics, r.hub, about{typ: "meridian_queue_access", id: state.Queue.ValueString()}, "read", err)
		return
	}
	// A list equal to the state's keeps the state's set as it is.
	if state.Entries.IsNull() || !accessEqual(accessToProto(ctx, state.Entries, &resp.Diagnostics), q.GetAccess()) {
		set, d := accessToModel(ctx, q.GetAccess())
		resp.Diagnostics.Append(d...)
		state.Entries = set
	}
	state.ID = types.StringValue(q.GetPath())
	state.Queue = types.StringValue(q.GetPath())
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *queueAccessResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state queueAccessModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	acl := accessToProto(ctx, plan.Entries, &resp.Diagnostics)
	seen := accessToProto(ctx, state.Entries, &resp.Diagnostics)
	if r.write(ctx, plan.Queue.ValueString(), acl, seen, true, &resp.Diagnostics) == nil {
		return
	}
	plan.ID = plan.Queue
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *queueAccessResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state queueAccessModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	_, err := r.hub.queues.GetQueue(ctx, &meridianv1.GetQueueRequest{Path: state.Queue.ValueString()})
	if status.Code(err) == codes.NotFound {
		return
	}
	seen := accessToProto(ctx, state.Entries, &resp.Diagnostics)
	r.write(ctx, state.Queue.ValueString(), nil, seen, true, &resp.Diagnostics)
}

func (r *queueAccessResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	id, err := parseQueueImportID(req.ID)
	if err != nil {
		resp.Diagnostics.AddError("Invalid import id for meridian_queue_access", err.Error())
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("queue"), id)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), id)...)
}
