package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// Version is meridianctl's version. Release builds set it with
// -ldflags "-X github.com/meridian-gpu/meridian/internal/cli.Version=v1.2.3";
// otherwise it is the module version from the build info, or "dev".
var Version = buildVersion()

func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// versionInfo is what `version -o json|yaml` prints.
type versionInfo struct {
	Client struct {
		Version   string `json:"version"`
		GoVersion string `json:"go_version"`
	} `json:"client"`
	Hub *hubInfo `json:"hub,omitempty"`
}

type hubInfo struct {
	Address string `json:"address"`
	Version string `json:"version"`
	HubID   string `json:"hub_id"`
	Status  string `json:"status"`
}

func (a *app) versionCommand() *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the client version and the hub's version and health",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var info versionInfo
			info.Client.Version = Version
			info.Client.GoVersion = runtime.Version()
			var hubErr error
			if !clientOnly {
				var h *meridianv1.Health
				err := a.call(cmd.Context(), func(ctx context.Context, conn *grpc.ClientConn) error {
					var err error
					h, err = meridianv1.NewAdminServiceClient(conn).GetHealth(ctx, &meridianv1.GetHealthRequest{})
					return err
				})
				if err != nil {
					hubErr = a.rpcError(cmd.Context(), err, object{kind: "hub health"})
				} else {
					info.Hub = &hubInfo{
						Address: a.hub,
						Version: dash(h.GetVersion()),
						HubID:   dash(h.GetHubId()),
						Status:  enumName(h.GetStatus().String(), "HEALTH_STATUS_"),
					}
				}
			}
			if a.output == "table" {
				fmt.Fprintf(a.env.Stdout, "Client: meridianctl %s (%s)\n", info.Client.Version, info.Client.GoVersion)
				if info.Hub != nil {
					fmt.Fprintf(a.env.Stdout, "Hub:    %s (%s at %s, %s)\n", info.Hub.Version, info.Hub.HubID, info.Hub.Address, info.Hub.Status)
				}
				return hubErr
			}
			js, err := json.MarshalIndent(info, "", "  ")
			if err != nil {
				return fmt.Errorf("encode version: %w", err)
			}
			if err := a.writeJSONBytes(js); err != nil {
				return err
			}
			return hubErr
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print the client version only; do not contact the hub")
	return cmd
}
