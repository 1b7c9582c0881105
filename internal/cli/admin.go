package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

func (a *app) admin(conn *grpc.ClientConn) meridianv1.AdminServiceClient {
	return meridianv1.NewAdminServiceClient(conn)
}

func (a *app) whoamiCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Show who the hub takes you for: user, groups, how you authenticated, global permissions",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp *meridianv1.WhoAmIResponse
			err := a.call(cmd.Context(), func(ctx context.Context, conn *grpc.ClientConn) error {
				var err error
				resp, err = a.admin(conn).WhoAmI(ctx, &meridianv1.WhoAmIRequest{})
				return err
			})
			if err != nil {
				return a.rpcError(cmd.Context(), err, object{kind: "identity", action: "ask who you are"})
			}
			if a.output != "table" {
				return a.writeMessage(resp)
			}
			p := resp.GetPrincipal()
			t := newTable(a.env.Stdout)
			t.row("USER:", dash(p.GetUser()))
			t.row("GROUPS:", dash(strings.Join(p.GetGroups(), ", ")))
			t.row("METHOD:", dash(p.GetMethod()))
			if p.GetTokenId() != "" {
				t.row("TOKEN ID:", p.GetTokenId())
			}
			t.row("PERMISSIONS:", dash(strings.Join(resp.GetPermissions(), ", ")))
			return t.flush()
		},
	}
}

func (a *app) tokenCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Create, list and revoke API tokens for automation",
		Long: `API tokens ("mrd_<id>_<secret>") let automation such as CI or Terraform
call the hub. A token grants at most the global permissions of the user
who creates it; per-queue access is granted on queues to "token:<id>".
The secret is printed once, by 'token create'; the hub keeps only a hash.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErrorf("token: missing subcommand (create, list or revoke)")
		},
	}
	cmd.AddCommand(a.tokenCreateCommand(), a.tokenListCommand(), a.tokenRevokeCommand())
	return cmd
}

func (a *app) tokenCreateCommand() *cobra.Command {
	var tok meridianv1.APIToken
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "create --description TEXT [--permission P]... [--group G]... [--ttl 720h]",
		Short: "Create an API token; its secret is printed once, on stdout",
		Long: `Create an API token. Its secret is printed once, alone on stdout (so
'meridianctl token create ... > ci.token' stores it), and cannot be shown
again: the hub keeps only a hash. What the token is and when it expires
is printed on stderr. -o json prints the whole answer, secret included.

The token acts as the user given with --user (default token:<id>) and in
the groups given with --group, each of which you must belong to; it holds
the --permission global permissions, each of which you must hold.`,
		Example: `  meridianctl token create --description "CI for acme" --group acme-ci --ttl 720h > ci.token
  meridianctl token create --description terraform --permission queues.create -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strings.TrimSpace(tok.Description) == "" {
				return usageErrorf("token create: --description is required (what the token is for)")
			}
			req := &meridianv1.CreateAPITokenRequest{Token: &tok}
			if cmd.Flags().Changed("ttl") {
				if ttl < time.Hour || ttl > 366*24*time.Hour {
					return usageErrorf("--ttl: must be between 1h and 8784h (a year); got %s", ttl)
				}
				req.Ttl = durationpb.New(ttl)
			}
			var resp *meridianv1.CreateAPITokenResponse
			err := a.call(cmd.Context(), func(ctx context.Context, conn *grpc.ClientConn) error {
				var err error
				resp, err = a.admin(conn).CreateAPIToken(ctx, req)
				return err
			})
			if err != nil {
				return a.rpcError(cmd.Context(), err, object{kind: "API token", action: "create API tokens"})
			}
			t := resp.GetToken()
			fmt.Fprintf(a.env.Stderr, "API token %s created (acts as %s; expires %s).\n", t.GetId(), tokenUser(t), timestamp(t.GetExpireTime()))
			fmt.Fprintln(a.env.Stderr, "warning: the secret is shown only this once and cannot be shown again; store it now (for example in a file for --token-file).")
			if a.output != "table" {
				return a.writeMessage(resp)
			}
			fmt.Fprintln(a.env.Stdout, resp.GetSecret())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&tok.Description, "description", "", "what the token is for (required)")
	f.StringArrayVar(&tok.Permissions, "permission", nil, "global permission it grants, such as queues.create (repeatable)")
	f.StringArrayVar(&tok.Groups, "group", nil, "group it acts in (repeatable)")
	f.StringVar(&tok.User, "user", "", "user name it acts as (default token:<id>)")
	f.DurationVar(&ttl, "ttl", 0, "lifetime, 1h to a year (default: the hub's, 90 days)")
	return cmd
}

func tokenUser(t *meridianv1.APIToken) string {
	if t.GetUser() != "" {
		return t.GetUser()
	}
	return "token:" + t.GetId()
}

// tokenState is active, expired or revoked at now.
func tokenState(t *meridianv1.APIToken, now time.Time) string {
	switch {
	case t.GetRevokeTime() != nil:
		return "revoked"
	case t.GetExpireTime() != nil && !now.Before(t.GetExpireTime().AsTime()):
		return "expired"
	}
	return "active"
}

func (a *app) tokenListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List API tokens (never their secrets): all with tokens.create, else your own",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var all []*meridianv1.APIToken
			req := &meridianv1.ListAPITokensRequest{PageSize: 1000}
			err := a.pages(cmd.Context(), object{kind: "API token list", action: "list API tokens"}, &req.PageToken,
				func(ctx context.Context, conn *grpc.ClientConn) (string, error) {
					resp, err := a.admin(conn).ListAPITokens(ctx, req)
					all = append(all, resp.GetTokens()...)
					return resp.GetNextPageToken(), err
				})
			if err != nil {
				return err
			}
			if a.output != "table" {
				return a.writeMessage(&meridianv1.ListAPITokensResponse{Tokens: all})
			}
			if len(all) == 0 {
				fmt.Fprintln(a.env.Stderr, "no API tokens; create one with 'meridianctl token create --description TEXT'")
				return nil
			}
			now := a.env.Now()
			t := newTable(a.env.Stdout, "ID", "DESCRIPTION", "USER", "GROUPS", "PERMISSIONS", "CREATED BY", "AGE", "EXPIRES", "LAST USED", "STATE")
			for _, tk := range all {
				lastUsed := "never"
				if tk.GetLastUsedTime() != nil {
					lastUsed = age(now, tk.GetLastUsedTime()) + " ago"
				}
				t.row(tk.GetId(), dash(truncate(tk.GetDescription(), 40)), tokenUser(tk), dash(strings.Join(tk.GetGroups(), ",")),
					dash(strings.Join(tk.GetPermissions(), ",")), dash(tk.GetCreatedBy()), age(now, tk.GetCreateTime()),
					timestamp(tk.GetExpireTime()), lastUsed, tokenState(tk, now))
			}
			return t.flush()
		},
	}
}

func (a *app) tokenRevokeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an API token at once (revoking one already revoked is not an error)",
		Args:  exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var tk *meridianv1.APIToken
			err := a.call(cmd.Context(), func(ctx context.Context, conn *grpc.ClientConn) error {
				var err error
				tk, err = a.admin(conn).RevokeAPIToken(ctx, &meridianv1.RevokeAPITokenRequest{Id: args[0]})
				return err
			})
			if err != nil {
				return a.rpcError(cmd.Context(), err, lookup("API token", args[0], "id").act("revoke"))
			}
			if a.output != "table" {
				return a.writeMessage(tk)
			}
			fmt.Fprintf(a.env.Stdout, "API token %s revoked (at %s)\n", tk.GetId(), timestamp(tk.GetRevokeTime()))
			return nil
		},
	}
}

// pages calls one page at a time until the hub returns no next page
// token. call returns the next token; token points at the request's.
func (a *app) pages(ctx context.Context, about object, token *string, call func(ctx context.Context, conn *grpc.ClientConn) (string, error)) error {
	for page := 0; ; page++ {
		var next string
		err := a.call(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
			var err error
			next, err = call(ctx, conn)
			return err
		})
		if err != nil {
			return a.rpcError(ctx, err, about)
		}
		if next == "" {
			return nil
		}
		if next == *token || page > 100_000 {
			return &exitError{code: ExitError, msg: "the hub returned the same page token twice; stopping"}
		}
		*token = next
	}
}

// auditResults maps --result words to the enum.
var auditResults = map[string]meridianv1.AuditResult{
	"allowed":         meridianv1.AuditResult_AUDIT_RESULT_ALLOWED,
	"denied":          meridianv1.AuditResult_AUDIT_RESULT_DENIED,
	"unauthenticated": meridianv1.AuditResult_AUDIT_RESULT_UNAUTHENTICATED,
	"failed":          meridianv1.AuditResult_AUDIT_RESULT_FAILED,
}

func auditResultName(r meridianv1.AuditResult) string {
	if r == meridianv1.AuditResult_AUDIT_RESULT_UNSPECIFIED {
		return "-"
	}
	return strings.ToLower(enumName(r.String(), "AUDIT_RESULT_"))
}

// parseTimeFlag reads --since/--until: a duration back from now (1h, 30m)
// or an RFC 3339 time.
func parseTimeFlag(name, v string, now time.Time) (*timestamppb.Timestamp, error) {
	if v == "" {
		return nil, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		if d < 0 {
			return nil, usageErrorf("--%s: a duration goes back from now and must not be negative (got %s)", name, v)
		}
		return timestamppb.New(now.Add(-d)), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return nil, usageErrorf("--%s: want a duration back from now (1h, 30m) or an RFC 3339 time (2026-12-01T09:00:00Z); got %q", name, v)
	}
	return timestamppb.New(t), nil
}

func (a *app) auditCommand() *cobra.Command {
	var req meridianv1.ListAuditEventsRequest
	var since, until, result string
	var limit int
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show the audit log: who changed or was refused what, newest first (needs audit.read)",
		Long: `Show audit events, newest first: every mutation and every refused request,
with who made it, how they authenticated, the RPC and verb, the target,
the result and why. Filters are combined; --target matches a prefix (a
queue path prefix, an id). --since and --until take a duration back from
now (1h) or an RFC 3339 time. At most --limit events are shown (0: all).`,
		Example: `  meridianctl audit --since 1h
  meridianctl audit --user alice --result denied
  meridianctl audit --target acme/vision --verb queues.update -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			now := a.env.Now()
			var err error
			if req.Since, err = parseTimeFlag("since", since, now); err != nil {
				return err
			}
			if req.Until, err = parseTimeFlag("until", until, now); err != nil {
				return err
			}
			if req.Since != nil && req.Until != nil && !req.Since.AsTime().Before(req.Until.AsTime()) {
				return usageErrorf("--since must be before --until")
			}
			if result != "" {
				r, ok := auditResults[strings.ToLower(result)]
				if !ok {
					return usageErrorf("--result: unknown result %q (use allowed, denied, unauthenticated or failed)", result)
				}
				req.Result = r
			}
			if limit < 0 {
				return usageErrorf("--limit: must not be negative (got %d)", limit)
			}
			var all []*meridianv1.AuditEvent
			req.PageSize = 1000
			for page := 0; ; page++ {
				if limit > 0 {
					req.PageSize = int32(min(1000, limit-len(all)))
				}
				var resp *meridianv1.ListAuditEventsResponse
				err := a.call(cmd.Context(), func(ctx context.Context, conn *grpc.ClientConn) error {
					var err error
					resp, err = a.admin(conn).ListAuditEvents(ctx, &req)
					return err
				})
				if err != nil {
					return a.rpcError(cmd.Context(), err, object{kind: "audit log", action: "read the audit log"})
				}
				all = append(all, resp.GetEvents()...)
				if limit > 0 && len(all) >= limit {
					all = all[:limit]
					break
				}
				if resp.GetNextPageToken() == "" {
					break
				}
				if resp.GetNextPageToken() == req.GetPageToken() || page > 100_000 {
					return &exitError{code: ExitError, msg: "the hub returned the same page token twice; stopping"}
				}
				req.PageToken = resp.GetNextPageToken()
			}
			if a.output != "table" {
				return a.writeMessage(&meridianv1.ListAuditEventsResponse{Events: all})
			}
			if len(all) == 0 {
				fmt.Fprintln(a.env.Stderr, "no audit events match")
				return nil
			}
			t := newTable(a.env.Stdout, "TIME", "USER", "METHOD", "RPC/VERB", "TARGET", "RESULT", "REASON")
			for _, ev := range all {
				t.row(timestamp(ev.GetTime()), dash(ev.GetPrincipal().GetUser()), dash(ev.GetPrincipal().GetMethod()),
					rpcVerb(ev), dash(ev.GetTarget()), auditResultName(ev.GetResult()), dash(ev.GetReason()))
			}
			return t.flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.User, "user", "", "only events of this user")
	f.StringVar(&req.Verb, "verb", "", "only events of this verb, such as queues.update or workloads.submit")
	f.StringVar(&req.Target, "target", "", "only events whose target starts with this (queue path prefix, id)")
	f.StringVar(&since, "since", "", "only events at or after this: a duration back from now (1h) or an RFC 3339 time")
	f.StringVar(&until, "until", "", "only events before this: a duration back from now or an RFC 3339 time")
	f.StringVar(&result, "result", "", "only events with this result: allowed, denied, unauthenticated or failed")
	f.IntVar(&limit, "limit", 100, "show at most this many events (0: all)")
	return cmd
}

// rpcVerb is the audit table's RPC/VERB cell: the method's short name and
// the verb, "UpdateQueue/queues.update".
func rpcVerb(ev *meridianv1.AuditEvent) string {
	rpc := ev.GetRpc()
	if i := strings.LastIndexByte(rpc, '/'); i >= 0 {
		rpc = rpc[i+1:]
	}
	switch {
	case rpc != "" && ev.GetVerb() != "":
		return rpc + "/" + ev.GetVerb()
	case rpc != "":
		return rpc
	}
	return dash(ev.GetVerb())
}
