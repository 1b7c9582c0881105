package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// clusterResource manages whether an existing cluster takes new work:
// drain (cordon) and resume. Registering a cluster, its labels and its
// credentials need the hub's cluster registration API, which does not
// exist yet; until then a cluster joins when its agent connects.
type clusterResource struct{ hub *hubClient }

var (
	_ resource.ResourceWithConfigure   = (*clusterResource)(nil)
	_ resource.ResourceWithImportState = (*clusterResource)(nil)
)

func newClusterResource() resource.Resource { return &clusterResource{} }

type clusterModel struct {
	ID          types.String `tfsdk:"id"`
	Draining    types.Bool   `tfsdk:"draining"`
	DrainReason types.String `tfsdk:"drain_reason"`
	State       types.String `tfsdk:"state"`
	Labels      types.Map    `tfsdk:"labels"`
}

func (r *clusterResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_cluster"
}

func (r *clusterResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.hub = clientFrom(req.ProviderData, &resp.Diagnostics)
}

func (r *clusterResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Whether a cluster of the fleet takes new work: `draining = true` closes it to new dispatches (a cordon; running work " +
			"continues), `false` reopens it. The cluster must already be known to the hub: a cluster joins when its agent connects. " +
			"Registering clusters, their labels and credentials from Terraform waits for the hub's cluster registration API.\n\n" +
			"Destroying the resource reopens the cluster if it was draining. Needs `clusters.manage`.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Required: true, MarkdownDescription: "The cluster's id, as its agent registered it (`data.meridian_clusters`).",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"draining": schema.BoolAttribute{
				Optional: true, Computed: true, Default: booldefault.StaticBool(false),
				MarkdownDescription: "Close the cluster to new dispatches. Defaults to `false` (open).",
			},
			"drain_reason": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(""),
				MarkdownDescription: "Why it is draining, in plain words; shown by `meridianctl clusters` and the dashboard where the hub records it. Only with `draining = true`.",
			},
			"state": schema.StringAttribute{
				Computed: true, MarkdownDescription: "`READY`, `DRAINING` or `LOST`, as the hub sees it.",
			},
			"labels": schema.MapAttribute{
				Computed: true, ElementType: types.StringType, MarkdownDescription: "The labels its agent advertises.",
			},
		},
	}
}

// apply drains or resumes the cluster as m says and fills m from the
// answer.
func (r *clusterResource) apply(ctx context.Context, m *clusterModel, diags *diag.Diagnostics) {
	id := m.ID.ValueString()
	a := about{typ: "meridian_cluster", id: id, field: func(f string) (path.Path, string, bool) {
		if f == "reason" {
			return path.Root("drain_reason"), "drain_reason", true
		}
		return path.Empty(), "", false
	}}
	if !m.Draining.ValueBool() && m.DrainReason.ValueString() != "" {
		diags.AddAttributeError(path.Root("drain_reason"), "drain_reason without draining", fmt.Sprintf("meridian_cluster %s: drain_reason is set but draining is false; set draining = true or leave the reason out", id))
		return
	}
	var c *meridianv1.Cluster
	var err error
	if m.Draining.ValueBool() {
		c, err = r.hub.clusters.DrainCluster(ctx, &meridianv1.DrainClusterRequest{Id: id, Reason: m.DrainReason.ValueString()})
	} else {
		c, err = r.hub.clusters.ResumeCluster(ctx, &meridianv1.ResumeClusterRequest{Id: id})
	}
	if status.Code(err) == codes.NotFound {
		diags.AddAttributeError(path.Root("id"), fmt.Sprintf("%s: not known to the hub", a),
			fmt.Sprintf("%s\n\nA cluster joins the fleet when its agent first connects; start the agent (meridian-agent, or the meridian-agent Helm chart) and apply again.", status.Convert(err).Message()))
		return
	}
	if err != nil {
		addErr(diags, r.hub, a, "set draining", err)
		return
	}
	want, reason := m.Draining, m.DrainReason
	diags.Append(fillCluster(ctx, m, c)...)
	// The answer may predate the registry's update: what was asked is
	// what now holds (a later read shows otherwise if it does not).
	m.Draining, m.DrainReason = want, reason
	if want.ValueBool() && m.State.ValueString() == "READY" {
		m.State = types.StringValue("DRAINING")
	}
}

func fillCluster(ctx context.Context, m *clusterModel, c *meridianv1.Cluster) diag.Diagnostics {
	m.ID = types.StringValue(c.GetId())
	switch c.GetState() {
	case meridianv1.ClusterState_CLUSTER_STATE_DRAINING:
		m.Draining = types.BoolValue(true)
	case meridianv1.ClusterState_CLUSTER_STATE_READY:
		m.Draining = types.BoolValue(false)
	default:
		// LOST says nothing about the drain flag: keep what we knew.
		if m.Draining.IsNull() || m.Draining.IsUnknown() {
			m.Draining = types.BoolValue(c.GetDrainReason() != "")
		}
	}
	// A hub whose cluster registry does not record the reason answers "";
	// keep the configured one then, rather than plan it again forever.
	if c.GetDrainReason() != "" || !m.Draining.ValueBool() || m.DrainReason.IsNull() || m.DrainReason.IsUnknown() {
		m.DrainReason = types.StringValue(c.GetDrainReason())
	}
	m.State = types.StringValue(enumName(c.GetState().String(), "CLUSTER_STATE_"))
	labels, d := types.MapValueFrom(ctx, types.StringType, nonNil(c.GetLabels()))
	m.Labels = labels
	return d
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func (r *clusterResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	r.applyPlan(ctx, req.Plan, &resp.State, &resp.Diagnostics)
}

// applyPlan is Create and Update: both make the hub's drain flag what the
// plan says and store the plan.
func (r *clusterResource) applyPlan(ctx context.Context, p tfsdk.Plan, st *tfsdk.State, diags *diag.Diagnostics) {
	var plan clusterModel
	diags.Append(p.Get(ctx, &plan)...)
	if diags.HasError() {
		return
	}
	r.apply(ctx, &plan, diags)
	if diags.HasError() {
		return
	}
	diags.Append(st.Set(ctx, &plan)...)
}

func (r *clusterResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state clusterModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	c, err := r.hub.clusters.GetCluster(ctx, &meridianv1.GetClusterRequest{Id: state.ID.ValueString()})
	if status.Code(err) == codes.NotFound {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addErr(&resp.Diagnostics, r.hub, about{typ: "meridian_cluster", id: state.ID.ValueString()}, "read", err)
		return
	}
	resp.Diagnostics.Append(fillCluster(ctx, &state, c)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *clusterResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	r.applyPlan(ctx, req.Plan, &resp.State, &resp.Diagnostics)
}

func (r *clusterResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state clusterModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || !state.Draining.ValueBool() {
		return
	}
	_, err := r.hub.clusters.ResumeCluster(ctx, &meridianv1.ResumeClusterRequest{Id: state.ID.ValueString()})
	if err != nil && status.Code(err) != codes.NotFound {
		addErr(&resp.Diagnostics, r.hub, about{typ: "meridian_cluster", id: state.ID.ValueString()}, "resume (on destroy)", err)
	}
}

func (r *clusterResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}
