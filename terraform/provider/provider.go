package provider

import (
	"context"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/meridian-gpu/meridian/internal/cli"
)

// The environment variables the provider reads when its configuration
// leaves a setting out.
const (
	envEndpoint = "MERIDIAN_ENDPOINT"
	envToken    = "MERIDIAN_TOKEN"
	envCAFile   = "MERIDIAN_CA_FILE"
)

// TypeName is the provider's name in HCL and in resource type names.
const TypeName = "meridian"

// New returns the provider factory for a build version.
func New(version string) func() provider.Provider {
	return func() provider.Provider { return &meridianProvider{version: version} }
}

type meridianProvider struct{ version string }

var _ provider.Provider = (*meridianProvider)(nil)

type providerModel struct {
	Endpoint      types.String `tfsdk:"endpoint"`
	Token         types.String `tfsdk:"token"`
	CAFile        types.String `tfsdk:"ca_file"`
	CAPEM         types.String `tfsdk:"ca_pem"`
	TLS           types.Bool   `tfsdk:"tls"`
	TLSServerName types.String `tfsdk:"tls_server_name"`
}

func (p *meridianProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = TypeName
	resp.Version = p.version
}

func (p *meridianProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Manages Meridian's queue tree (queues, quotas per accelerator class, access lists) and API tokens, " +
			"and reads the fleet, through the hub's gRPC API. Authenticate with an API token " +
			"(`meridianctl token create`); the token needs the permissions and queue verbs the managed objects need " +
			"(`queues.create` for tenants, `manage` on a parent for its children, `tokens.create` for tokens).",
		Attributes: map[string]schema.Attribute{
			"endpoint": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "host:port of the hub's gRPC API. Defaults to `$" + envEndpoint + "`, else `" + cli.DefaultHub + "`. " +
					"A token is sent in plaintext only to a loopback address; anything else needs TLS (`ca_file`, `ca_pem` or `tls`).",
			},
			"token": schema.StringAttribute{
				Optional: true, Sensitive: true,
				MarkdownDescription: "API token (`mrd_<id>_<secret>`) sent as bearer with every call. Defaults to `$" + envToken + "`; prefer the environment variable so that the token is not written in the configuration.",
			},
			"ca_file": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "PEM file of the CA that signed the hub's certificate; implies TLS. Defaults to `$" + envCAFile + "`.",
			},
			"ca_pem": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "The same CA bundle as PEM text instead of a file; implies TLS. Conflicts with `ca_file`.",
			},
			"tls": schema.BoolAttribute{
				Optional:            true,
				MarkdownDescription: "Use TLS with the system's root CAs (implied by `ca_file` or `ca_pem`).",
			},
			"tls_server_name": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Name to verify the hub's certificate against, when it differs from the endpoint's host.",
			},
		},
	}
}

func (p *meridianProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var m providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	for name, v := range map[string]interface{ IsUnknown() bool }{
		"endpoint": m.Endpoint, "token": m.Token, "ca_file": m.CAFile, "ca_pem": m.CAPEM, "tls": m.TLS, "tls_server_name": m.TLSServerName,
	} {
		if v.IsUnknown() {
			resp.Diagnostics.AddAttributeError(path.Root(name), "Unknown provider setting",
				"The provider's "+name+" depends on a value known only after apply; the provider must know it to plan. Give it directly or through the environment.")
		}
	}
	if resp.Diagnostics.HasError() {
		return
	}
	s := connSettings{
		endpoint:   firstSet(m.Endpoint.ValueString(), os.Getenv(envEndpoint), cli.DefaultHub),
		token:      firstSet(m.Token.ValueString(), os.Getenv(envToken)),
		caPEM:      m.CAPEM.ValueString(),
		tls:        m.TLS.ValueBool(),
		serverName: m.TLSServerName.ValueString(),
		version:    p.version,
	}
	if s.caPEM == "" {
		s.caFile = firstSet(m.CAFile.ValueString(), os.Getenv(envCAFile))
	} else {
		s.caFile = m.CAFile.ValueString()
	}
	c, err := dial(s)
	if err != nil {
		resp.Diagnostics.AddError("Meridian provider configuration", err.Error())
		return
	}
	resp.ResourceData = c
	resp.DataSourceData = c
}

func firstSet(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

func (p *meridianProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{newQueueResource, newQueueAccessResource, newAPITokenResource, newClusterResource}
}

func (p *meridianProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{newQueueDataSource, newQueuesDataSource, newClustersDataSource, newAcceleratorClassesDataSource}
}

// clientFrom takes the provider's client out of ProviderData; nil before
// the provider is configured (the framework calls Configure on resources
// early, with nil data, during validation).
func clientFrom(data any, diags interface {
	AddError(string, string)
}) *hubClient {
	if data == nil {
		return nil
	}
	c, ok := data.(*hubClient)
	if !ok {
		diags.AddError("Meridian provider", "unexpected provider data; this is a bug in the provider")
		return nil
	}
	return c
}
