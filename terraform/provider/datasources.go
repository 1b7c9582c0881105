package provider

import (
	"context"
	"slices"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"github.com/meridian-gpu/meridian/terraform/internal/quantity"
)

// --- shared pieces -----------------------------------------------------

type dsBase struct{ hub *hubClient }

func (d *dsBase) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.hub = clientFrom(req.ProviderData, &resp.Diagnostics)
}

// dsQuota is one quota in data source results.
type dsQuota struct {
	Nominal     types.String `tfsdk:"nominal"`
	BorrowLimit types.String `tfsdk:"borrow_limit"`
	LendLimit   types.String `tfsdk:"lend_limit"`
}

func dsQuotaAttrs() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"nominal":      schema.StringAttribute{Computed: true, MarkdownDescription: "Nominal quota in GPUs."},
		"borrow_limit": schema.StringAttribute{Computed: true, MarkdownDescription: "Borrow limit in GPUs; null means unlimited."},
		"lend_limit":   schema.StringAttribute{Computed: true, MarkdownDescription: "Lend limit in GPUs; null means all of nominal."},
	}
}

func dsQuotas(q *meridianv1.Queue) map[string]dsQuota {
	out := map[string]dsQuota{}
	for _, qq := range q.GetQuotas() {
		e := dsQuota{Nominal: types.StringValue(quantity.Format(qq.GetNominalMilliGpus())), BorrowLimit: types.StringNull(), LendLimit: types.StringNull()}
		if qq.BorrowLimitMilli != nil {
			e.BorrowLimit = types.StringValue(quantity.Format(qq.GetBorrowLimitMilli()))
		}
		if qq.LendLimitMilli != nil {
			e.LendLimit = types.StringValue(quantity.Format(qq.GetLendLimitMilli()))
		}
		out[qq.GetAcceleratorClass()] = e
	}
	return out
}

// dsQueue is one queue in data source results.
type dsQueue struct {
	Path                types.String       `tfsdk:"path"`
	Parent              types.String       `tfsdk:"parent"`
	Weight              types.Int64        `tfsdk:"weight"`
	Description         types.String       `tfsdk:"description"`
	Quotas              map[string]dsQuota `tfsdk:"quotas"`
	MaxPriority         types.Int64        `tfsdk:"max_priority"`
	AllowNonPreemptible types.Bool         `tfsdk:"allow_non_preemptible"`
	Revision            types.Int64        `tfsdk:"revision"`
	PendingWorkloads    types.Int64        `tfsdk:"pending_workloads"`
	RunningWorkloads    types.Int64        `tfsdk:"running_workloads"`
	Usage               map[string]dsUsage `tfsdk:"usage"`
}

type dsUsage struct {
	Usage           types.String  `tfsdk:"usage"`
	Borrowed        types.String  `tfsdk:"borrowed"`
	Lent            types.String  `tfsdk:"lent"`
	FairshareFactor types.Float64 `tfsdk:"fairshare_factor"`
}

func dsQueueAttrs(pathAttr schema.Attribute) map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"path":        pathAttr,
		"parent":      schema.StringAttribute{Computed: true, MarkdownDescription: "Parent queue's path; empty for a tenant."},
		"weight":      schema.Int64Attribute{Computed: true, MarkdownDescription: "Fairshare weight."},
		"description": schema.StringAttribute{Computed: true, MarkdownDescription: "Description."},
		"quotas": schema.MapNestedAttribute{Computed: true, MarkdownDescription: "Quota per accelerator class.",
			NestedObject: schema.NestedAttributeObject{Attributes: dsQuotaAttrs()}},
		"max_priority":          schema.Int64Attribute{Computed: true, MarkdownDescription: "Priority ceiling of the submit policy; null when none."},
		"allow_non_preemptible": schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether non-preemptible work may be submitted; null when the policy does not say."},
		"revision":              schema.Int64Attribute{Computed: true, MarkdownDescription: "Spec revision."},
		"pending_workloads":     schema.Int64Attribute{Computed: true, MarkdownDescription: "Workloads of the queue and below waiting."},
		"running_workloads":     schema.Int64Attribute{Computed: true, MarkdownDescription: "Workloads of the queue and below dispatched or running."},
		"usage": schema.MapNestedAttribute{Computed: true, MarkdownDescription: "Usage per accelerator class, in GPUs.",
			NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
				"usage":            schema.StringAttribute{Computed: true, MarkdownDescription: "GPUs held by admitted workloads of the queue and below."},
				"borrowed":         schema.StringAttribute{Computed: true, MarkdownDescription: "Part of usage above nominal."},
				"lent":             schema.StringAttribute{Computed: true, MarkdownDescription: "Part of nominal lent to other queues."},
				"fairshare_factor": schema.Float64Attribute{Computed: true, MarkdownDescription: "Fairshare factor in [0, 1]; higher is more deserving."},
			}}},
	}
}

func toDSQueue(q *meridianv1.Queue) dsQueue {
	w := int64(q.GetWeight())
	if w == 0 {
		w = defaultWeight
	}
	out := dsQueue{
		Path: types.StringValue(q.GetPath()), Parent: types.StringValue(parentOf(q.GetPath())),
		Weight: types.Int64Value(w), Description: types.StringValue(q.GetDescription()),
		Quotas: dsQuotas(q), MaxPriority: types.Int64Null(), AllowNonPreemptible: types.BoolNull(),
		Revision:         types.Int64Value(q.GetRevision()),
		PendingWorkloads: types.Int64Value(int64(q.GetStatus().GetPendingWorkloads())),
		RunningWorkloads: types.Int64Value(int64(q.GetStatus().GetRunningWorkloads())),
		Usage:            map[string]dsUsage{},
	}
	if sp := q.GetSubmitPolicy(); sp != nil {
		if sp.MaxPriority != nil {
			out.MaxPriority = types.Int64Value(int64(sp.GetMaxPriority()))
		}
		if sp.AllowNonPreemptible != nil {
			out.AllowNonPreemptible = types.BoolValue(sp.GetAllowNonPreemptible())
		}
	}
	for _, c := range q.GetStatus().GetClasses() {
		out.Usage[c.GetAcceleratorClass()] = dsUsage{
			Usage: types.StringValue(quantity.Format(c.GetUsageMilli())), Borrowed: types.StringValue(quantity.Format(c.GetBorrowedMilli())),
			Lent: types.StringValue(quantity.Format(c.GetLentMilli())), FairshareFactor: types.Float64Value(c.GetFairshareFactor()),
		}
	}
	return out
}

// --- meridian_queue ----------------------------------------------------

type queueDataSource struct{ dsBase }

func newQueueDataSource() datasource.DataSource { return &queueDataSource{} }

func (d *queueDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_queue"
}

func (d *queueDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	attrs := dsQueueAttrs(schema.StringAttribute{Required: true, MarkdownDescription: "Path of the queue, for example `acme/vision`."})
	attrs["access"] = schema.ListNestedAttribute{Computed: true, MarkdownDescription: "The queue's access list.",
		NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
			"subject": schema.StringAttribute{Computed: true, MarkdownDescription: "`user:NAME`, `group:NAME` or `token:ID`."},
			"verbs":   schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Verbs granted."},
		}}}
	resp.Schema = schema.Schema{
		MarkdownDescription: "One queue of the queue tree with its quotas, submit policy, access list and current usage.",
		Attributes:          attrs,
	}
}

type dsAccess struct {
	Subject types.String `tfsdk:"subject"`
	Verbs   []string     `tfsdk:"verbs"`
}

type queueDSModel struct {
	dsQueue
	Access []dsAccess `tfsdk:"access"`
}

func (d *queueDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var p types.String
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("path"), &p)...)
	if resp.Diagnostics.HasError() {
		return
	}
	q, err := d.hub.queues.GetQueue(ctx, &meridianv1.GetQueueRequest{Path: p.ValueString()})
	if err != nil {
		addErr(&resp.Diagnostics, d.hub, about{typ: "data.meridian_queue", id: p.ValueString()}, "read", err)
		return
	}
	m := queueDSModel{dsQueue: toDSQueue(q), Access: []dsAccess{}}
	for _, a := range q.GetAccess() {
		m.Access = append(m.Access, dsAccess{Subject: types.StringValue(a.GetSubject()), Verbs: a.GetVerbs()})
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// --- meridian_queues ---------------------------------------------------

type queuesDataSource struct{ dsBase }

func newQueuesDataSource() datasource.DataSource { return &queuesDataSource{} }

func (d *queuesDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_queues"
}

func (d *queuesDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "The queues the token may see, in path order; with `prefix`, only that queue and those below it.",
		Attributes: map[string]schema.Attribute{
			"prefix": schema.StringAttribute{Optional: true, MarkdownDescription: "Only this queue and the queues below it, for example `acme`."},
			"paths":  schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "The queues' paths, in order."},
			"queues": schema.ListNestedAttribute{Computed: true, MarkdownDescription: "The queues, in path order.",
				NestedObject: schema.NestedAttributeObject{Attributes: dsQueueAttrs(schema.StringAttribute{Computed: true, MarkdownDescription: "Path."})}},
		},
	}
}

type queuesDSModel struct {
	Prefix types.String `tfsdk:"prefix"`
	Paths  []string     `tfsdk:"paths"`
	Queues []dsQueue    `tfsdk:"queues"`
}

func (d *queuesDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m queuesDSModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	m.Paths, m.Queues = []string{}, []dsQueue{}
	tok := ""
	for {
		out, err := d.hub.queues.ListQueues(ctx, &meridianv1.ListQueuesRequest{Prefix: m.Prefix.ValueString(), PageSize: 1000, PageToken: tok})
		if err != nil {
			addErr(&resp.Diagnostics, d.hub, about{typ: "data.meridian_queues", id: m.Prefix.ValueString()}, "list", err)
			return
		}
		for _, q := range out.GetQueues() {
			m.Paths = append(m.Paths, q.GetPath())
			m.Queues = append(m.Queues, toDSQueue(q))
		}
		if tok = out.GetNextPageToken(); tok == "" {
			break
		}
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// --- meridian_clusters -------------------------------------------------

type clustersDataSource struct{ dsBase }

func newClustersDataSource() datasource.DataSource { return &clustersDataSource{} }

func (d *clustersDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_clusters"
}

type dsCapacity struct {
	Total         types.String `tfsdk:"total"`
	Free          types.String `tfsdk:"free"`
	Nodes         types.Int64  `tfsdk:"nodes"`
	FreeWholeGPUs types.Int64  `tfsdk:"free_whole_gpus"`
}

func dsCapacityAttrs() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"total":           schema.StringAttribute{Computed: true, MarkdownDescription: "GPUs installed on schedulable nodes."},
		"free":            schema.StringAttribute{Computed: true, MarkdownDescription: "GPUs free now, fractions included."},
		"nodes":           schema.Int64Attribute{Computed: true, MarkdownDescription: "Nodes that carry the class."},
		"free_whole_gpus": schema.Int64Attribute{Computed: true, MarkdownDescription: "Whole GPUs free now."},
	}
}

type dsCluster struct {
	ID           types.String          `tfsdk:"id"`
	State        types.String          `tfsdk:"state"`
	Connector    types.String          `tfsdk:"connector"`
	Labels       map[string]string     `tfsdk:"labels"`
	AgentVersion types.String          `tfsdk:"agent_version"`
	DrainReason  types.String          `tfsdk:"drain_reason"`
	Capacity     map[string]dsCapacity `tfsdk:"capacity"`
}

type clustersDSModel struct {
	State    types.String `tfsdk:"state"`
	Selector types.String `tfsdk:"label_selector"`
	IDs      []string     `tfsdk:"ids"`
	Clusters []dsCluster  `tfsdk:"clusters"`
}

func (d *clustersDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "The fleet as the hub sees it from the agents' advertisements, with capacity by accelerator class.",
		Attributes: map[string]schema.Attribute{
			"state":          schema.StringAttribute{Optional: true, MarkdownDescription: "Only clusters in this state: `READY`, `LOST` or `DRAINING`."},
			"label_selector": schema.StringAttribute{Optional: true, MarkdownDescription: "Equality selector on cluster labels, for example `region=eu`."},
			"ids":            schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "The clusters' ids, sorted."},
			"clusters": schema.ListNestedAttribute{Computed: true, MarkdownDescription: "The clusters, sorted by id.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"id":            schema.StringAttribute{Computed: true, MarkdownDescription: "Cluster id."},
					"state":         schema.StringAttribute{Computed: true, MarkdownDescription: "`READY`, `LOST` or `DRAINING`."},
					"connector":     schema.StringAttribute{Computed: true, MarkdownDescription: "`KUBERNETES`, `SLURM` or `SIMCLUSTER`."},
					"labels":        schema.MapAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Labels the agent advertises."},
					"agent_version": schema.StringAttribute{Computed: true, MarkdownDescription: "Version of the agent."},
					"drain_reason":  schema.StringAttribute{Computed: true, MarkdownDescription: "Why it is draining, when it is."},
					"capacity": schema.MapNestedAttribute{Computed: true, MarkdownDescription: "Capacity per accelerator class.",
						NestedObject: schema.NestedAttributeObject{Attributes: dsCapacityAttrs()}},
				}}},
		},
	}
}

func enumName(full, prefix string) string {
	if len(full) > len(prefix) && full[:len(prefix)] == prefix {
		return full[len(prefix):]
	}
	return full
}

func (d *clustersDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m clustersDSModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	in := &meridianv1.ListClustersRequest{LabelSelector: m.Selector.ValueString()}
	if s := m.State.ValueString(); s != "" {
		v, ok := meridianv1.ClusterState_value["CLUSTER_STATE_"+s]
		if !ok || v == 0 {
			resp.Diagnostics.AddAttributeError(path.Root("state"), "Invalid cluster state", "state must be READY, LOST or DRAINING (got "+s+")")
			return
		}
		in.State = meridianv1.ClusterState(v)
	}
	out, err := d.hub.clusters.ListClusters(ctx, in)
	if err != nil {
		addErr(&resp.Diagnostics, d.hub, about{typ: "data.meridian_clusters"}, "list", err)
		return
	}
	m.IDs, m.Clusters = []string{}, []dsCluster{}
	for _, c := range out.GetClusters() {
		dc := dsCluster{
			ID: types.StringValue(c.GetId()), State: types.StringValue(enumName(c.GetState().String(), "CLUSTER_STATE_")),
			Connector: types.StringValue(enumName(c.GetConnector().String(), "CONNECTOR_KIND_")), Labels: c.GetLabels(),
			AgentVersion: types.StringValue(c.GetAgentVersion()), DrainReason: types.StringValue(c.GetDrainReason()),
			Capacity: map[string]dsCapacity{},
		}
		if dc.Labels == nil {
			dc.Labels = map[string]string{}
		}
		for _, cap := range c.GetCapacity() {
			dc.Capacity[cap.GetAcceleratorClass()] = dsCapacity{
				Total: types.StringValue(quantity.Format(cap.GetTotalMilli())), Free: types.StringValue(quantity.Format(cap.GetFreeMilli())),
				Nodes: types.Int64Value(int64(cap.GetNodes())), FreeWholeGPUs: types.Int64Value(int64(cap.GetFreeWholeGpus())),
			}
		}
		m.IDs = append(m.IDs, c.GetId())
		m.Clusters = append(m.Clusters, dc)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// --- meridian_accelerator_classes --------------------------------------

type classesDataSource struct{ dsBase }

func newAcceleratorClassesDataSource() datasource.DataSource { return &classesDataSource{} }

func (d *classesDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_accelerator_classes"
}

type dsClass struct {
	Name        types.String  `tfsdk:"name"`
	Total       types.String  `tfsdk:"total"`
	Free        types.String  `tfsdk:"free"`
	Nodes       types.Int64   `tfsdk:"nodes"`
	Clusters    []string      `tfsdk:"clusters"`
	InQuotas    types.Bool    `tfsdk:"in_quotas"`
	ClassWeight types.Float64 `tfsdk:"class_weight"`
}

type classesDSModel struct {
	Names   []string  `tfsdk:"names"`
	Classes []dsClass `tfsdk:"classes"`
}

func (d *classesDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "The accelerator classes the hub knows: those the fleet advertises (with their capacity summed over every cluster), " +
			"those queues hold quotas for, and those the hub's configuration weights (`scheduling.classWeights`). " +
			"These are the classes `meridian_queue` accepts in `quotas`.",
		Attributes: map[string]schema.Attribute{
			"names": schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "The class names, sorted."},
			"classes": schema.ListNestedAttribute{Computed: true, MarkdownDescription: "Each class, sorted by name.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"name":         schema.StringAttribute{Computed: true, MarkdownDescription: "Accelerator class, for example `nvidia-h100-80gb`."},
					"total":        schema.StringAttribute{Computed: true, MarkdownDescription: "GPUs installed, summed over the fleet."},
					"free":         schema.StringAttribute{Computed: true, MarkdownDescription: "GPUs free now, fractions included, summed over the fleet."},
					"nodes":        schema.Int64Attribute{Computed: true, MarkdownDescription: "Nodes that carry the class."},
					"clusters":     schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Clusters that advertise it, sorted; empty when none does now."},
					"in_quotas":    schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether some queue holds a quota for it by name."},
					"class_weight": schema.Float64Attribute{Computed: true, MarkdownDescription: "Its fairshare weight in the hub's configuration; null when not set."},
				}}},
		},
	}
}

func (d *classesDataSource) Read(ctx context.Context, _ datasource.ReadRequest, resp *datasource.ReadResponse) {
	classes, err := listClasses(ctx, d.hub)
	if err != nil {
		addErr(&resp.Diagnostics, d.hub, about{typ: "data.meridian_accelerator_classes"}, "list", err)
		return
	}
	m := classesDSModel{Names: []string{}, Classes: []dsClass{}}
	for _, c := range classes {
		dc := dsClass{
			Name: types.StringValue(c.GetName()), Total: types.StringValue(quantity.Format(c.GetTotalMilli())), Free: types.StringValue(quantity.Format(c.GetFreeMilli())),
			Nodes: types.Int64Value(int64(c.GetNodes())), Clusters: c.GetClusters(), InQuotas: types.BoolValue(c.GetInQuotas()), ClassWeight: types.Float64Null(),
		}
		if dc.Clusters == nil {
			dc.Clusters = []string{}
		}
		if c.ClassWeight != nil {
			dc.ClassWeight = types.Float64Value(c.GetClassWeight())
		}
		m.Names = append(m.Names, c.GetName())
		m.Classes = append(m.Classes, dc)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// classTotal is one class summed over the fleet.
type classTotal struct {
	name        string
	total, free int64
	nodes       int64
	clusters    []string
}

// classTotals sums the clusters' capacity by class, sorted by class.
func classTotals(cs []*meridianv1.Cluster) []classTotal {
	by := map[string]*classTotal{}
	for _, c := range cs {
		for _, cap := range c.GetCapacity() {
			t := by[cap.GetAcceleratorClass()]
			if t == nil {
				t = &classTotal{name: cap.GetAcceleratorClass()}
				by[t.name] = t
			}
			t.total += cap.GetTotalMilli()
			t.free += cap.GetFreeMilli()
			t.nodes += int64(cap.GetNodes())
			if !slices.Contains(t.clusters, c.GetId()) {
				t.clusters = append(t.clusters, c.GetId())
			}
		}
	}
	var out []classTotal
	for _, t := range by {
		slices.Sort(t.clusters)
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b classTotal) int {
		if a.name < b.name {
			return -1
		}
		if a.name > b.name {
			return 1
		}
		return 0
	})
	return out
}
