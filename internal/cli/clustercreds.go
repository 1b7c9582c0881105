package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// clusterCredentialCommands are `clusters register`, `clusters credentials`
// and `clusters revoke`: a cluster's NATS identity.
func (a *app) clusterCredentialCommands() []*cobra.Command {
	var rotate bool
	var credsFile string
	register := &cobra.Command{
		Use:   "register NAME",
		Short: "Register a cluster and issue its agent's NATS credential (shown once)",
		Long: `Register a cluster: the hub records it, makes its dispatch consumer and
issues its agent a NATS credential that may publish only NAME's subjects and
read only NAME's dispatches. The .creds file is printed on stdout (or
written to --creds-file), once: the hub keeps only its public key. Put it in
the agent chart's Secret, for example
  meridianctl clusters register east --creds-file east.creds
  kubectl -n meridian create secret generic east-nats --from-file=nats.creds=east.creds
--rotate issues one more credential for a registered cluster and leaves the
old one valid until 'meridianctl clusters revoke'. Needs clusters.manage.`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.registerCluster(cmd.Context(), args[0], rotate, credsFile)
		},
	}
	register.Flags().BoolVar(&rotate, "rotate", false, "issue another credential for a registered cluster (the first step of a rotation)")
	register.Flags().StringVar(&credsFile, "creds-file", "", "write the .creds file here (mode 0600, never overwritten) instead of stdout")

	list := &cobra.Command{
		Use:   "credentials NAME",
		Short: "List a registered cluster's NATS credentials by public key, active and revoked",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.listClusterCredentials(cmd.Context(), args[0])
		},
	}

	var key string
	var all bool
	revoke := &cobra.Command{
		Use:   "revoke NAME (--key USER_PUBLIC_KEY | --all)",
		Short: "Revoke a cluster's NATS credential; NATS disconnects its agent within seconds",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case key == "" && !all:
				return usageErrorf("revoke: give --key (a credential's public key, see 'meridianctl clusters credentials %s') or --all", args[0])
			case key != "" && all:
				return usageErrorf("revoke: --key and --all cannot be combined")
			}
			return a.revokeClusterCredentials(cmd.Context(), args[0], key, all)
		},
	}
	revoke.Flags().StringVar(&key, "key", "", "public key (U...) of the credential to revoke")
	revoke.Flags().BoolVar(&all, "all", false, "revoke every credential of the cluster")
	return []*cobra.Command{register, list, revoke}
}

func (a *app) registerCluster(ctx context.Context, id string, rotate bool, credsFile string) error {
	if credsFile != "" {
		if _, err := os.Stat(credsFile); err == nil {
			return usageErrorf("--creds-file: %q exists; it is never overwritten (remove it or pick another name)", credsFile)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return usageErrorf("--creds-file: %v", err)
		}
	}
	var resp *meridianv1.RegisterClusterResponse
	err := a.call(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		resp, err = meridianv1.NewClusterServiceClient(conn).RegisterCluster(ctx, &meridianv1.RegisterClusterRequest{Id: id, Rotate: rotate})
		return err
	})
	if err != nil {
		return a.rpcError(ctx, err, object{kind: "cluster", id: id}.act("register"))
	}
	if credsFile != "" {
		f, err := os.OpenFile(credsFile, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			_, err = f.WriteString(resp.GetNatsCreds())
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			return fmt.Errorf("--creds-file %q: %w (the credential %s is issued; revoke it with 'meridianctl clusters revoke %s --key %s')",
				credsFile, err, resp.GetCredential().GetPublicKey(), id, resp.GetCredential().GetPublicKey())
		}
	}
	what := "registered"
	if rotate {
		what = "has a new credential; the old ones stay valid until revoked"
	}
	fmt.Fprintf(a.env.Stderr, "cluster %s %s (NATS user %s, inbox %s).\n", resp.GetClusterId(), what, resp.GetCredential().GetPublicKey(), resp.GetInboxPrefix())
	if credsFile != "" {
		fmt.Fprintf(a.env.Stderr, "The .creds file is in %s; it is shown only this once. Put it in the agent's Secret (key nats.creds).\n", credsFile)
	} else {
		fmt.Fprintln(a.env.Stderr, "warning: the .creds file below is shown only this once; store it now (the agent chart's Secret, key nats.creds).")
	}
	if a.output != "table" {
		if credsFile != "" {
			resp.NatsCreds = "" // it went to the file
		}
		return a.writeMessage(resp)
	}
	if credsFile == "" {
		fmt.Fprint(a.env.Stdout, resp.GetNatsCreds())
	}
	return nil
}

func (a *app) listClusterCredentials(ctx context.Context, id string) error {
	var resp *meridianv1.ListClusterCredentialsResponse
	err := a.call(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		resp, err = meridianv1.NewClusterServiceClient(conn).ListClusterCredentials(ctx, &meridianv1.ListClusterCredentialsRequest{Id: id})
		return err
	})
	if err != nil {
		return a.rpcError(ctx, err, object{kind: "cluster", id: id, idField: "id"})
	}
	if a.output != "table" {
		return a.writeMessage(resp)
	}
	t := newTable(a.env.Stdout, "PUBLIC KEY", "ISSUED", "STATE")
	for _, c := range resp.GetCredentials() {
		state := "active"
		if c.GetRevokeTime() != nil {
			state = "revoked " + timestamp(c.GetRevokeTime())
		}
		t.row(c.GetPublicKey(), timestamp(c.GetIssueTime()), state)
	}
	return t.flush()
}

func (a *app) revokeClusterCredentials(ctx context.Context, id, key string, all bool) error {
	var resp *meridianv1.RevokeClusterCredentialsResponse
	err := a.call(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		resp, err = meridianv1.NewClusterServiceClient(conn).RevokeClusterCredentials(ctx, &meridianv1.RevokeClusterCredentialsRequest{Id: id, PublicKey: key, All: all})
		return err
	})
	if err != nil {
		return a.rpcError(ctx, err, object{kind: "cluster", id: id}.act("revoke the credentials of"))
	}
	if a.output != "table" {
		return a.writeMessage(resp)
	}
	if len(resp.GetRevoked()) == 0 {
		fmt.Fprintf(a.env.Stdout, "cluster %s: nothing to revoke (already revoked)\n", id)
		return nil
	}
	keys := make([]string, 0, len(resp.GetRevoked()))
	for _, c := range resp.GetRevoked() {
		keys = append(keys, c.GetPublicKey())
	}
	fmt.Fprintf(a.env.Stdout, "cluster %s: revoked %s; NATS disconnects agents using them now\n", id, strings.Join(keys, ", "))
	return nil
}
