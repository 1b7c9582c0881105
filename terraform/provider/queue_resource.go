package provider

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/meridian-gpu/meridian/hub/api/validation"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// defaultForceDestroyTimeout bounds how long a force_destroy waits for the
// cancelled workloads to end.
const defaultForceDestroyTimeout = "10m"

// maxPriority is the hub's priority range, which bounds max_priority.
const maxPriority = 1_000_000

type queueResource struct{ hub *hubClient }

var (
	_ resource.ResourceWithConfigure      = (*queueResource)(nil)
	_ resource.ResourceWithImportState    = (*queueResource)(nil)
	_ resource.ResourceWithValidateConfig = (*queueResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*queueResource)(nil)
)

func newQueueResource() resource.Resource { return &queueResource{} }

func (r *queueResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_queue"
}

func (r *queueResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.hub = clientFrom(req.ProviderData, &resp.Diagnostics)
}

func (r *queueResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A queue of Meridian's queue tree `tenant/team/project`: its fairshare weight, its quota per accelerator class " +
			"(nominal, borrow limit, lend limit) and its submit policy. Its access list is managed by `meridian_queue_access`, never by this resource.\n\n" +
			"The tree is a tree of paths: a queue's parent is its path without the last segment, so a parent always exists before its " +
			"children and a cycle cannot be written down. `parent` is therefore derived from `path`; setting it only documents the " +
			"intent (and orders the resources: `parent = meridian_queue.team.path`), and a `parent` that does not match the path is an error.\n\n" +
			"Updates and deletes carry the queue's `revision` as Terraform last read it: when someone changed the queue's weight, quotas, " +
			"description or submit policy in between (with `meridianctl queue apply` or the API), the apply stops with an error instead of " +
			"overwriting the change; plan again to see it.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The queue's path.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"path": schema.StringAttribute{
				Required: true,
				MarkdownDescription: "The queue's path: 1 to 3 segments separated by `/` (tenant, team, project), each a DNS-1123 label of at most 63 characters, " +
					"for example `acme/vision/train`. Its parent must exist. Changing it replaces the queue.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"parent": schema.StringAttribute{
				Optional: true, Computed: true,
				MarkdownDescription: "The parent queue's path, derived from `path` (empty for a tenant). Optional: when set it must equal the path without its last segment.",
			},
			"weight": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(defaultWeight),
				MarkdownDescription: "Fairshare weight relative to the sibling queues, 1 to 1000000. Defaults to 1.",
			},
			"description": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(""),
				MarkdownDescription: "Free-form description, at most 1024 bytes.",
			},
			"quotas": schema.MapNestedAttribute{
				Optional: true,
				MarkdownDescription: "Quota per accelerator class, keyed by class (for example `nvidia-h100-80gb`; `*` stands for every class the queue does not list). " +
					"Quantities are GPUs (`\"8\"`, `\"0.5\"`) or GPU milli (`\"2500m\"`). The class must be one the hub knows (`data.meridian_accelerator_classes`). " +
					"Quotas are global across clusters.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"nominal": schema.StringAttribute{
						Required:            true,
						MarkdownDescription: "GPUs guaranteed to this queue's subtree.",
					},
					"borrow_limit": schema.StringAttribute{
						Optional: true,
						MarkdownDescription: "How many GPUs above nominal the queue may borrow from idle siblings. Unset means unlimited; `\"0\"` forbids borrowing. " +
							"Nominal plus borrow limit must not exceed what the parent may hold (its nominal plus its borrow limit, when it sets one).",
					},
					"lend_limit": schema.StringAttribute{
						Optional:            true,
						MarkdownDescription: "How many of its nominal GPUs the queue lends to other queues while idle. Unset means all of them; must not exceed `nominal`.",
					},
				}},
			},
			"max_priority": schema.Int64Attribute{
				Optional:            true,
				MarkdownDescription: "Submit policy: the highest workload priority its submitters may use (the strictest along the path applies). Unset means no ceiling.",
			},
			"allow_non_preemptible": schema.BoolAttribute{
				Optional: true,
				MarkdownDescription: "Submit policy, the preemption policy: whether its submitters may submit non-preemptible workloads. `false` means every workload " +
					"below this queue can be preempted. Unset means they may.",
			},
			"force_destroy": schema.BoolAttribute{
				Optional: true, Computed: true, Default: booldefault.StaticBool(false),
				MarkdownDescription: "Destroying a queue that still has queued or running work fails unless this is `true`; then the provider cancels the " +
					"unfinished workloads of the queue and of the queues below it, waits for them to end (at most `force_destroy_timeout`) and deletes the queue. " +
					"Set it and apply before the destroy.",
			},
			"force_destroy_timeout": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(defaultForceDestroyTimeout),
				MarkdownDescription: "How long a `force_destroy` waits for the cancelled workloads to end, as a Go duration (`\"30s\"`, `\"10m\"`). Defaults to `" + defaultForceDestroyTimeout + "`.",
			},
			"revision": schema.Int64Attribute{
				Computed:            true,
				MarkdownDescription: "The hub's revision of the queue's spec as last read; updates and deletes succeed only while it is current.",
			},
		},
	}
}

// ValidateConfig checks what needs no hub: the path, the parent, the
// quantities, the ranges.
func (r *queueResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m queueModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	validateQueueConfig(ctx, &m, &resp.Diagnostics)
}

// validateQueueConfig checks a queue's configuration without the hub.
// Unknown values are skipped: they are checked again at apply.
func validateQueueConfig(ctx context.Context, m *queueModel, diags *diag.Diagnostics) {
	if !m.Path.IsUnknown() && !m.Path.IsNull() {
		p := m.Path.ValueString()
		if err := validation.CheckQueuePath(p); err != nil {
			diags.AddAttributeError(path.Root("path"), "Invalid queue path", fmt.Sprintf("path: %v", err))
		} else if !m.Parent.IsNull() && !m.Parent.IsUnknown() && m.Parent.ValueString() != parentOf(p) {
			want := fmt.Sprintf("%q", parentOf(p))
			if parentOf(p) == "" {
				want = `"" (or leave it out): a one-segment path is a tenant, which has no parent`
			}
			diags.AddAttributeError(path.Root("parent"), "Parent does not match the path",
				fmt.Sprintf("parent is %q but path %q says its parent is %s. A queue's parent is its path without the last segment; "+
					"to move a queue under another parent, change its path (which replaces it).", m.Parent.ValueString(), p, want))
		}
	}
	if !m.Weight.IsUnknown() && !m.Weight.IsNull() {
		if w := m.Weight.ValueInt64(); w < 1 || w > validation.MaxQueueWeight {
			diags.AddAttributeError(path.Root("weight"), "Invalid weight", fmt.Sprintf("weight must be between 1 and %d (got %d)", validation.MaxQueueWeight, w))
		}
	}
	if !m.Description.IsUnknown() && len(m.Description.ValueString()) > validation.MaxQueueDescriptionLen {
		diags.AddAttributeError(path.Root("description"), "Description too long",
			fmt.Sprintf("description must be at most %d bytes (got %d)", validation.MaxQueueDescriptionLen, len(m.Description.ValueString())))
	}
	if !m.MaxPriority.IsUnknown() && !m.MaxPriority.IsNull() {
		if v := m.MaxPriority.ValueInt64(); v < -maxPriority || v > maxPriority {
			diags.AddAttributeError(path.Root("max_priority"), "Invalid priority ceiling", fmt.Sprintf("max_priority must be between %d and %d (got %d)", -maxPriority, maxPriority, v))
		}
	}
	if !m.ForceDestroyTimeout.IsUnknown() && !m.ForceDestroyTimeout.IsNull() {
		if _, err := parseTimeout(m.ForceDestroyTimeout.ValueString()); err != nil {
			diags.AddAttributeError(path.Root("force_destroy_timeout"), "Invalid timeout", "force_destroy_timeout "+err.Error())
		}
	}
	quotas, known, d := quotasFromModel(ctx, m.Quotas)
	diags.Append(d...)
	if !known || d.HasError() {
		return
	}
	for class := range quotas {
		if class == validation.AnyClass {
			continue
		}
		if err := checkClassName(class); err != nil {
			diags.AddAttributeError(path.Root("quotas").AtMapKey(class), "Invalid accelerator class", fmt.Sprintf("quotas[%q]: %v", class, err))
		}
	}
	_ = quotasToProto(quotas, diags)
}

// checkClassName checks an accelerator class name the way the hub does.
func checkClassName(class string) error {
	q := &meridianv1.Queue{Path: "x", Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: class}}}
	for _, v := range validation.FieldViolations(validation.ValidateQueue(q)) {
		if strings.HasSuffix(v.GetField(), "accelerator_class") {
			return fmt.Errorf("%s", v.GetDescription())
		}
	}
	return nil
}

// parseTimeout reads force_destroy_timeout.
func parseTimeout(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as \"30s\" or \"10m\"", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q must be positive", s)
	}
	return d, nil
}

// ModifyPlan derives parent from path and checks, against the hub, what
// the configuration alone cannot: that every quota's class exists and that
// no quota borrows above its parent's.
func (r *queueResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return // destroy
	}
	var plan queueModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// parent is derived from path when the configuration leaves it out;
	// a configured one must stay as configured (ValidateConfig, or Create
	// when it was unknown then, checks that it matches).
	var cfgParent types.String
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("parent"), &cfgParent)...)
	if cfgParent.IsNull() && !plan.Path.IsUnknown() {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("parent"), types.StringValue(parentOf(plan.Path.ValueString())))...)
	}
	if r.hub == nil || plan.Path.IsUnknown() {
		return
	}
	quotas, known, _ := quotasFromModel(ctx, plan.Quotas)
	if !known || len(quotas) == 0 {
		return
	}
	var d diag.Diagnostics
	spec := queueSpec(ctx, &plan, &d)
	if d.HasError() {
		return // ValidateConfig reported it
	}
	r.checkClasses(ctx, spec, &resp.Diagnostics)
	r.checkParent(ctx, spec, true, &resp.Diagnostics)
}

// checkClasses reports each quota class the hub does not know, naming the
// ones it does.
func (r *queueResource) checkClasses(ctx context.Context, spec *meridianv1.Queue, diags *diag.Diagnostics) {
	known, err := knownClasses(ctx, r.hub)
	if err != nil {
		addErr(diags, r.hub, about{typ: "meridian_queue", id: spec.GetPath()}, "list accelerator classes", err)
		return
	}
	if len(known.names) == 0 {
		diags.AddWarning("No accelerator classes known",
			fmt.Sprintf("meridian_queue %s: the hub knows no accelerator classes yet (no cluster has advertised capacity, no queue has a quota and its configuration weights none), so the quota classes were not checked.", spec.GetPath()))
		return
	}
	for _, qq := range spec.GetQuotas() {
		c := qq.GetAcceleratorClass()
		if c == validation.AnyClass || known.has(c) {
			continue
		}
		diags.AddAttributeError(path.Root("quotas").AtMapKey(c), "Unknown accelerator class",
			fmt.Sprintf("meridian_queue %s: quotas[%q]: the hub knows no accelerator class %q%s. Known classes: %s (or \"*\" for every class the queue does not list).",
				spec.GetPath(), c, c, known.suggest(c), strings.Join(known.names, ", ")))
	}
}

// checkParent reports a quota whose nominal plus borrow limit exceeds
// what the parent may hold. A parent that does not exist yet (created in
// the same apply) is checked at apply time; planning tolerates it.
func (r *queueResource) checkParent(ctx context.Context, spec *meridianv1.Queue, planning bool, diags *diag.Diagnostics) {
	parent := parentOf(spec.GetPath())
	if parent == "" || len(spec.GetQuotas()) == 0 {
		return
	}
	pq, err := r.hub.queues.GetQueue(ctx, &meridianv1.GetQueueRequest{Path: parent})
	if status.Code(err) == codes.NotFound {
		if !planning {
			diags.AddAttributeError(path.Root("path"), "Parent queue does not exist",
				fmt.Sprintf("meridian_queue %s: its parent queue %q does not exist; create it first (reference it, for example parent = meridian_queue.<name>.path, so that Terraform orders them).", spec.GetPath(), parent))
		}
		return
	}
	if err != nil {
		addErr(diags, r.hub, about{typ: "meridian_queue", id: parent}, "read the parent queue", err)
		return
	}
	for _, v := range borrowAboveParent(spec, pq) {
		diags.AddAttributeError(quotaAttr(v.class, v.field), "Borrowing above the parent", fmt.Sprintf("meridian_queue %s: %s", spec.GetPath(), v.msg))
	}
}

func (r *queueResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan queueModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// Values unknown at plan time are known now: check them too.
	validateQueueConfig(ctx, &plan, &resp.Diagnostics)
	spec := queueSpec(ctx, &plan, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	r.checkParent(ctx, spec, false, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	var q *meridianv1.Queue
	err := retryAborted(ctx, func() (err error) {
		q, err = r.hub.queues.CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: spec})
		return err
	})
	if err != nil {
		addErr(&resp.Diagnostics, r.hub, about{typ: "meridian_queue", id: spec.GetPath(), field: queueFields(classesOf(spec))}, "create", err)
		return
	}
	resp.Diagnostics.Append(fillQueueModel(ctx, &plan, q)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *queueResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state queueModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	q, err := r.hub.queues.GetQueue(ctx, &meridianv1.GetQueueRequest{Path: state.Path.ValueString()})
	if status.Code(err) == codes.NotFound {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addErr(&resp.Diagnostics, r.hub, about{typ: "meridian_queue", id: state.Path.ValueString()}, "read", err)
		return
	}
	resp.Diagnostics.Append(fillQueueModel(ctx, &state, q)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *queueResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state queueModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	spec := queueSpec(ctx, &plan, &resp.Diagnostics)
	old := queueSpec(ctx, &state, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	fields := changedSpecFields(old, spec)
	if len(fields) == 0 {
		// Only force_destroy or its timeout changed: they live in state.
		plan.Revision = state.Revision
		plan.ID, plan.Parent = state.ID, state.Parent
		resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
		return
	}
	if slices.Contains(fields, "quotas") {
		r.checkParent(ctx, spec, false, &resp.Diagnostics)
		if resp.Diagnostics.HasError() {
			return
		}
	}
	a := about{typ: "meridian_queue", id: spec.GetPath(), field: queueFields(classesOf(spec))}
	var q *meridianv1.Queue
	err := r.withRevision(ctx, a, state.Revision.ValueInt64(), old, &resp.Diagnostics, func(rev int64) error {
		in := proto.Clone(spec).(*meridianv1.Queue)
		in.Revision = rev
		return retryAborted(ctx, func() (err error) {
			q, err = r.hub.queues.UpdateQueue(ctx, &meridianv1.UpdateQueueRequest{Queue: in, UpdateMask: &fieldmaskpb.FieldMask{Paths: fields}})
			return err
		})
	})
	if err != nil {
		addErr(&resp.Diagnostics, r.hub, a, "update", err)
		return
	}
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(fillQueueModel(ctx, &plan, q)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// isRevisionConflict reports whether err is the hub refusing a write
// because the queue's revision moved (the body's revision or If-Match).
func isRevisionConflict(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return false
	}
	return strings.Contains(st.Message(), "at revision") || strings.Contains(st.Message(), "If-Match") || strings.Contains(st.Message(), "at ETag")
}

// withRevision runs write with the revision Terraform last read. When the
// hub says the queue moved on, it reads the queue again: if the fields
// this resource owns are still as Terraform last saw them (only another
// resource's field changed, such as the access list through
// meridian_queue_access), it writes once more at the new revision;
// otherwise it reports the conflict, naming the fields that changed, and
// writes nothing.
func (r *queueResource) withRevision(ctx context.Context, a about, rev int64, seen *meridianv1.Queue, diags *diag.Diagnostics, write func(rev int64) error) error {
	err := write(rev)
	if !isRevisionConflict(err) {
		return err
	}
	cur, gerr := r.hub.queues.GetQueue(ctx, &meridianv1.GetQueueRequest{Path: seen.GetPath()})
	if gerr != nil {
		return err
	}
	if changed := changedSpecFields(seen, cur); len(changed) > 0 {
		diags.AddAttributeError(path.Root("revision"), fmt.Sprintf("%s: changed outside Terraform", a),
			fmt.Sprintf("%s was changed by someone else since Terraform last read it (revision %d, now %d; changed: %s), so this apply stopped rather than overwrite that change. "+
				"Run terraform plan again: it reads the queue as it is now and shows what the apply would change.",
				a, rev, cur.GetRevision(), strings.Join(changed, ", ")))
		return nil
	}
	return write(cur.GetRevision())
}

func (r *queueResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state queueModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	p := state.Path.ValueString()
	a := about{typ: "meridian_queue", id: p}
	if state.ForceDestroy.ValueBool() {
		timeout, err := parseTimeout(state.ForceDestroyTimeout.ValueString())
		if err != nil {
			timeout = 10 * time.Minute
		}
		if !r.drain(ctx, a, p, timeout, &resp.Diagnostics) {
			return
		}
	}
	old := queueSpec(ctx, &state, &resp.Diagnostics)
	err := r.withRevision(ctx, a, state.Revision.ValueInt64(), old, &resp.Diagnostics, func(rev int64) error {
		mctx := metadata.AppendToOutgoingContext(ctx, "if-match", strconv.Quote(strconv.FormatInt(rev, 10)))
		return retryAborted(ctx, func() error {
			_, err := r.hub.queues.DeleteQueue(mctx, &meridianv1.DeleteQueueRequest{Path: p})
			return err
		})
	})
	switch {
	case status.Code(err) == codes.NotFound:
		return
	case err != nil && status.Code(err) == codes.FailedPrecondition && strings.Contains(status.Convert(err).Message(), "unfinished workload"):
		resp.Diagnostics.AddAttributeError(path.Root("force_destroy"), fmt.Sprintf("%s: delete refused: the queue has unfinished work", a),
			status.Convert(err).Message()+"\n\nTerraform does not cancel work unless asked: set force_destroy = true on this queue and apply, "+
				"then destroy again, and the provider cancels the queue's unfinished workloads (and those of the queues below it) before deleting it.")
	case err != nil:
		addErr(&resp.Diagnostics, r.hub, a, "delete", err)
	}
}

// nonTerminal are the phases of a workload that still holds or waits for
// capacity.
var nonTerminal = []meridianv1.WorkloadPhase{
	meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED,
	meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED,
	meridianv1.WorkloadPhase_WORKLOAD_PHASE_ACCEPTED,
	meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING,
	meridianv1.WorkloadPhase_WORKLOAD_PHASE_PREEMPTED,
}

// unfinished lists the ids of the non-terminal workloads of a queue and
// the queues below it.
func (r *queueResource) unfinished(ctx context.Context, queue string) ([]string, error) {
	var ids []string
	tok := ""
	for {
		resp, err := r.hub.wl.ListWorkloads(ctx, &meridianv1.ListWorkloadsRequest{Queue: queue, Phase: nonTerminal, PageSize: 1000, PageToken: tok})
		if err != nil {
			return nil, err
		}
		for _, w := range resp.GetWorkloads() {
			ids = append(ids, w.GetId())
		}
		if tok = resp.GetNextPageToken(); tok == "" {
			return ids, nil
		}
	}
}

// drain cancels the unfinished workloads of queue and below, and waits
// until none is left or timeout passes. It reports whether the queue is
// clear.
func (r *queueResource) drain(ctx context.Context, a about, queue string, timeout time.Duration, diags *diag.Diagnostics) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cancelled := map[string]bool{}
	for {
		ids, err := r.unfinished(ctx, queue)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			addErr(diags, r.hub, a, "list the queue's unfinished workloads", err)
			return false
		}
		if len(ids) == 0 {
			return true
		}
		for _, id := range ids {
			if cancelled[id] {
				continue
			}
			_, err := r.hub.wl.CancelWorkload(ctx, &meridianv1.CancelWorkloadRequest{Id: id, Reason: "queue " + queue + " destroyed by Terraform (force_destroy)"})
			if err != nil && status.Code(err) != codes.NotFound && status.Code(err) != codes.FailedPrecondition {
				addErr(diags, r.hub, about{typ: "workload", id: id}, "cancel (force_destroy of "+a.String()+")", err)
				return false
			}
			cancelled[id] = true
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
			continue
		}
		break
	}
	ids, _ := r.unfinished(context.WithoutCancel(ctx), queue)
	diags.AddAttributeError(path.Root("force_destroy_timeout"), fmt.Sprintf("%s: destroy timed out", a),
		fmt.Sprintf("%d workload(s) of queue %s were cancelled but had not ended after %s: %s. Raise force_destroy_timeout or wait, then destroy again.",
			len(ids), queue, timeout, strings.Join(first(ids, 10), ", ")))
	return false
}

func first(ss []string, n int) []string {
	if len(ss) > n {
		return ss[:n]
	}
	return ss
}

func (r *queueResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	id, err := parseQueueImportID(req.ID)
	if err != nil {
		resp.Diagnostics.AddError("Invalid import id for meridian_queue", err.Error())
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("path"), id)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), id)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("force_destroy"), false)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("force_destroy_timeout"), defaultForceDestroyTimeout)...)
}

// parseQueueImportID reads an import id: a queue path, with surrounding
// slashes and spaces tolerated.
func parseQueueImportID(id string) (string, error) {
	p := strings.Trim(strings.TrimSpace(id), "/")
	if err := validation.CheckQueuePath(p); err != nil {
		return "", fmt.Errorf("the import id is a queue path such as acme/vision/train: %v", err)
	}
	return p, nil
}
