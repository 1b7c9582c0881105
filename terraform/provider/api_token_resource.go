package provider

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/setplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

type apiTokenResource struct{ hub *hubClient }

var (
	_ resource.ResourceWithConfigure      = (*apiTokenResource)(nil)
	_ resource.ResourceWithImportState    = (*apiTokenResource)(nil)
	_ resource.ResourceWithValidateConfig = (*apiTokenResource)(nil)
)

func newAPITokenResource() resource.Resource { return &apiTokenResource{} }

type apiTokenModel struct {
	ID          types.String `tfsdk:"id"`
	Description types.String `tfsdk:"description"`
	Permissions types.Set    `tfsdk:"permissions"`
	User        types.String `tfsdk:"user"`
	Groups      types.Set    `tfsdk:"groups"`
	TTL         types.String `tfsdk:"ttl"`
	ExpireTime  types.String `tfsdk:"expire_time"`
	CreateTime  types.String `tfsdk:"create_time"`
	CreatedBy   types.String `tfsdk:"created_by"`
	Secret      types.String `tfsdk:"secret"`
}

func (r *apiTokenResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_api_token"
}

func (r *apiTokenResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.hub = clientFrom(req.ProviderData, &resp.Diagnostics)
}

func replace() []planmodifier.String {
	return []planmodifier.String{stringplanmodifier.RequiresReplace()}
}

func (r *apiTokenResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "An API token for automation (CI, another Terraform workspace). The hub keeps only a hash of the secret, " +
			"so the secret exists once, in the create response: this resource keeps it in `secret`.\n\n" +
			"~> **The secret is stored in the Terraform state in plain text.** Anyone who can read the state can act as the token. " +
			"Keep the state in an encrypted backend with restricted access, or create tokens with `meridianctl token create` instead.\n\n" +
			"A token cannot be changed: any change replaces it (a new token and secret; the old one is revoked). Destroying it revokes it at once. " +
			"A token that expired or was revoked outside Terraform is planned anew. Creating one needs `tokens.create`; a token carries at most its creator's permissions. " +
			"Give it queue rights with the subject `token:<id>` in a `meridian_queue_access`.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed: true, MarkdownDescription: "The token's public id; the import id.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"description": schema.StringAttribute{
				Optional: true, MarkdownDescription: "What the token is for, at most 256 characters.", PlanModifiers: replace(),
			},
			"permissions": schema.SetAttribute{
				Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Global permissions it grants, each held by the creator too (for example `queues.create`).",
				PlanModifiers:       []planmodifier.Set{setplanmodifier.RequiresReplace()},
			},
			"user": schema.StringAttribute{
				Optional: true, MarkdownDescription: "User name it acts as; unset means `token:<id>`. Only an admin names another user.", PlanModifiers: replace(),
			},
			"groups": schema.SetAttribute{
				Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Groups it acts in, each one its creator belongs to.",
				PlanModifiers:       []planmodifier.Set{setplanmodifier.RequiresReplace()},
			},
			"ttl": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Lifetime as a Go duration, from 1h to 8760h (a year); unset means the hub's default, 90 days. Conflicts with `expire_time`.",
				PlanModifiers:       replace(),
			},
			"expire_time": schema.StringAttribute{
				Optional: true, Computed: true,
				MarkdownDescription: "When it stops working (RFC 3339). Set it, or `ttl`, or neither; the hub reports it either way.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplaceIfConfigured(), stringplanmodifier.UseStateForUnknown()},
			},
			"create_time": schema.StringAttribute{
				Computed: true, MarkdownDescription: "When it was created (RFC 3339).",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"created_by": schema.StringAttribute{
				Computed: true, MarkdownDescription: "Who created it.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"secret": schema.StringAttribute{
				Computed: true, Sensitive: true,
				MarkdownDescription: "The bearer credential `mrd_<id>_<secret>`. Known only to the workspace that created the token: after an import it is null.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
		},
	}
}

func (r *apiTokenResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m apiTokenModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if !m.TTL.IsNull() && !m.TTL.IsUnknown() {
		d, err := time.ParseDuration(m.TTL.ValueString())
		switch {
		case err != nil:
			resp.Diagnostics.AddAttributeError(path.Root("ttl"), "Invalid ttl", fmt.Sprintf("ttl %q is not a duration such as \"720h\"", m.TTL.ValueString()))
		case d < time.Hour || d > 8760*time.Hour:
			resp.Diagnostics.AddAttributeError(path.Root("ttl"), "Invalid ttl", fmt.Sprintf("ttl must be between 1h and 8760h (got %s)", d))
		}
	}
	if !m.ExpireTime.IsNull() && !m.ExpireTime.IsUnknown() {
		if _, err := time.Parse(time.RFC3339, m.ExpireTime.ValueString()); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("expire_time"), "Invalid expire_time", fmt.Sprintf("expire_time %q is not an RFC 3339 time such as 2027-01-31T00:00:00Z", m.ExpireTime.ValueString()))
		}
		if !m.TTL.IsNull() {
			resp.Diagnostics.AddAttributeError(path.Root("ttl"), "Conflicting settings", "give ttl or expire_time, not both")
		}
	}
}

func (r *apiTokenResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan apiTokenModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	tok := &meridianv1.APIToken{Description: plan.Description.ValueString(), User: plan.User.ValueString()}
	resp.Diagnostics.Append(plan.Permissions.ElementsAs(ctx, &tok.Permissions, true)...)
	resp.Diagnostics.Append(plan.Groups.ElementsAs(ctx, &tok.Groups, true)...)
	in := &meridianv1.CreateAPITokenRequest{Token: tok}
	if !plan.TTL.IsNull() {
		d, _ := time.ParseDuration(plan.TTL.ValueString())
		in.Ttl = durationpb.New(d)
	}
	if !plan.ExpireTime.IsNull() && !plan.ExpireTime.IsUnknown() {
		t, _ := time.Parse(time.RFC3339, plan.ExpireTime.ValueString())
		tok.ExpireTime = timestamppb.New(t)
	}
	if resp.Diagnostics.HasError() {
		return
	}
	out, err := r.hub.admin.CreateAPIToken(ctx, in)
	if err != nil {
		addErr(&resp.Diagnostics, r.hub, about{typ: "meridian_api_token", field: func(f string) (path.Path, string, bool) {
			f = strings.TrimPrefix(f, "token.")
			switch f {
			case "description", "user", "permissions", "groups", "expire_time", "ttl":
				return path.Root(f), f, true
			}
			return path.Empty(), "", false
		}}, "create", err)
		return
	}
	fillToken(&plan, out.GetToken())
	plan.Secret = types.StringValue(out.GetSecret())
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// fillToken sets the hub-owned attributes; the configured ones stay as
// planned (the hub echoes them).
func fillToken(m *apiTokenModel, t *meridianv1.APIToken) {
	m.ID = types.StringValue(t.GetId())
	exp := t.GetExpireTime().AsTime()
	if prior, err := time.Parse(time.RFC3339, m.ExpireTime.ValueString()); err != nil || !prior.Equal(exp) {
		// Keep the configured spelling of the same instant.
		m.ExpireTime = types.StringValue(exp.UTC().Format(time.RFC3339))
	}
	m.CreateTime = types.StringValue(t.GetCreateTime().AsTime().UTC().Format(time.RFC3339))
	m.CreatedBy = types.StringValue(t.GetCreatedBy())
}

// findToken pages through the caller's tokens for id; nil when it is not
// there.
func (r *apiTokenResource) findToken(ctx context.Context, id string) (*meridianv1.APIToken, error) {
	tok := ""
	for {
		resp, err := r.hub.admin.ListAPITokens(ctx, &meridianv1.ListAPITokensRequest{PageSize: 1000, PageToken: tok})
		if err != nil {
			return nil, err
		}
		for _, t := range resp.GetTokens() {
			if t.GetId() == id {
				return t, nil
			}
		}
		if tok = resp.GetNextPageToken(); tok == "" {
			return nil, nil
		}
	}
}

func (r *apiTokenResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state apiTokenModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	t, err := r.findToken(ctx, state.ID.ValueString())
	if err != nil {
		addErr(&resp.Diagnostics, r.hub, about{typ: "meridian_api_token", id: state.ID.ValueString()}, "read", err)
		return
	}
	if t == nil || t.GetRevokeTime() != nil || (t.GetExpireTime() != nil && t.GetExpireTime().AsTime().Before(time.Now())) {
		// Gone, revoked or expired: plan a new one.
		resp.State.RemoveResource(ctx)
		return
	}
	fillToken(&state, t)
	state.Description = optString(state.Description, t.GetDescription())
	state.User = optString(state.User, t.GetUser())
	var d1, d2 = setOpt(ctx, state.Permissions, t.GetPermissions()), setOpt(ctx, state.Groups, t.GetGroups())
	state.Permissions, state.Groups = d1, d2
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// optString is the hub's value, null when it is empty and was null.
func optString(prior types.String, v string) types.String {
	if v == "" && prior.IsNull() {
		return prior
	}
	return types.StringValue(v)
}

// setOpt is the hub's list as a set, null when it is empty and was null.
func setOpt(ctx context.Context, prior types.Set, v []string) types.Set {
	if len(v) == 0 && (prior.IsNull() || prior.IsUnknown()) {
		return types.SetNull(types.StringType)
	}
	s, _ := types.SetValueFrom(ctx, types.StringType, v)
	return s
}

// Update only happens for attributes that do not force replacement, and
// there are none the hub can change; it keeps the plan.
func (r *apiTokenResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan apiTokenModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *apiTokenResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state apiTokenModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	_, err := r.hub.admin.RevokeAPIToken(ctx, &meridianv1.RevokeAPITokenRequest{Id: state.ID.ValueString()})
	if err != nil && status.Code(err) != codes.NotFound {
		addErr(&resp.Diagnostics, r.hub, about{typ: "meridian_api_token", id: state.ID.ValueString()}, "revoke", err)
	}
}

func (r *apiTokenResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if err := checkTokenImportID(req.ID); err != nil {
		resp.Diagnostics.AddError("Invalid import id for meridian_api_token", err.Error())
		return
	}
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}

// checkTokenImportID refuses a secret given as an import id: the id is
// the public part only.
func checkTokenImportID(id string) error {
	if id == "" {
		return fmt.Errorf("the import id is the token's public id, as `meridianctl token list` shows it")
	}
	if strings.HasPrefix(id, "mrd_") {
		return fmt.Errorf("that looks like a token's secret (mrd_...); import by the public id only (`meridianctl token list`), and never paste a secret into a command line")
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("that is not a token id: ids are letters, digits, '-' and '_' (`meridianctl token list`)")
		}
	}
	return nil
}
