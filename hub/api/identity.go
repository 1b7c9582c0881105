package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/audit"
	"github.com/meridian-gpu/meridian/hub/auth"
	"github.com/meridian-gpu/meridian/hub/authz"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// Token lifetimes: CreateAPIToken's default and bounds.
const (
	DefaultTokenTTL     = 90 * 24 * time.Hour
	MinTokenTTL         = time.Hour
	MaxTokenTTL         = 365 * 24 * time.Hour
	maxTokenDescription = 256
)

// WhoAmI answers with the caller as the guard authenticated it.
func (s *Service) WhoAmI(ctx context.Context, _ *meridianv1.WhoAmIRequest) (*meridianv1.WhoAmIResponse, error) {
	c := callerFrom(ctx)
	if c == nil {
		return &meridianv1.WhoAmIResponse{Principal: &meridianv1.Principal{User: "local-admin", Method: "none"},
			Permissions: []string{string(authz.PermAdmin)}}, nil
	}
	out := &meridianv1.WhoAmIResponse{Principal: principalProto(c.Principal)}
	for _, p := range c.Authz.Permissions() {
		out.Permissions = append(out.Permissions, string(p))
	}
	return out, nil
}

// tokenOwners answers authz's "whose token is this" for revocations.
type tokenOwners struct{ t *auth.Tokens }

func (o tokenOwners) TokenOwner(id string) (string, bool) {
	rec, err := o.t.Get(context.Background(), id)
	if err != nil {
		return "", false
	}
	return rec.CreatedBy, true // a token belongs to whoever created it
}

// tokenUser is the user a token acts as.
func tokenUser(r *auth.TokenRecord) string {
	if r.User != "" {
		return r.User
	}
	return auth.TokenUserPrefix + r.ID
}

func (s *Service) tokens() (*auth.Tokens, error) {
	if s.d.Tokens == nil {
		return nil, status.Error(codes.Unimplemented, "API tokens are not enabled on this hub (it runs without authentication)")
	}
	return s.d.Tokens, nil
}

// CreateAPIToken mints a token. The guard checked tokens.create and that
// the caller holds every permission asked for; the groups and the user
// are checked here, against the caller.
func (s *Service) CreateAPIToken(ctx context.Context, req *meridianv1.CreateAPITokenRequest) (*meridianv1.CreateAPITokenResponse, error) {
	ts, err := s.tokens()
	if err != nil {
		return nil, err
	}
	t := req.GetToken()
	if t == nil {
		return nil, invalid("token", "is required")
	}
	switch {
	case t.GetId() != "":
		return nil, invalid("token.id", "is assigned by the server and must be empty")
	case t.GetCreateTime() != nil || t.GetLastUsedTime() != nil || t.GetRevokeTime() != nil || t.GetCreatedBy() != "":
		return nil, invalid("token", "create_time, last_used_time, revoke_time and created_by are set by the server")
	case len(t.GetDescription()) > maxTokenDescription:
		return nil, invalid("token.description", "must be at most %d characters (got %d)", maxTokenDescription, len(t.GetDescription()))
	}
	for i, p := range t.GetPermissions() {
		if _, err := authz.ParsePermission(p); err != nil {
			return nil, invalid(indexField("token.permissions", i), "%v", err)
		}
	}
	caller, creator := callerFrom(ctx), "local-admin"
	admin := caller == nil || caller.Authz.Has(authz.PermAdmin)
	if caller != nil {
		creator = caller.Principal.User
	}
	if u := t.GetUser(); u != "" && !admin && u != creator {
		return nil, status.Errorf(codes.PermissionDenied, "token.user: a token may act only as you (%s) unless you are admin", creator)
	}
	for i, g := range t.GetGroups() {
		if !admin && !slices.Contains(caller.Principal.Groups, g) {
			return nil, status.Errorf(codes.PermissionDenied, "%s: you are not in group %q, so a token of yours cannot be", indexField("token.groups", i), g)
		}
	}
	ttl := DefaultTokenTTL
	now := s.now()
	switch {
	case t.GetExpireTime() != nil:
		ttl = t.GetExpireTime().AsTime().Sub(now)
	case req.GetTtl() != nil:
		ttl = req.GetTtl().AsDuration()
	}
	if ttl < MinTokenTTL || ttl > MaxTokenTTL {
		return nil, invalid("ttl", "a token lives between %s and %s (asked: %s)", MinTokenTTL, MaxTokenTTL, ttl.Round(time.Second))
	}
	sec, rec, err := ts.Issue(ctx, auth.IssueRequest{Name: t.GetDescription(), User: t.GetUser(), Groups: t.GetGroups(),
		Roles: t.GetPermissions(), CreatedBy: creator, TTL: ttl})
	if err != nil {
		return nil, status.Errorf(codes.Internal, "create API token: %v", err)
	}
	return &meridianv1.CreateAPITokenResponse{Token: tokenProto(rec), Secret: sec.Reveal()}, nil
}

func indexField(f string, i int) string { return fmt.Sprintf("%s[%d]", f, i) }

func tokenProto(r *auth.TokenRecord) *meridianv1.APIToken {
	t := &meridianv1.APIToken{Id: r.ID, Description: r.Name, Permissions: r.Roles, User: r.User, Groups: r.Groups,
		CreatedBy: r.CreatedBy, CreateTime: timestamppb.New(r.CreatedAt), ExpireTime: timestamppb.New(r.ExpiresAt)}
	if !r.LastUsedAt.IsZero() {
		t.LastUsedTime = timestamppb.New(r.LastUsedAt)
	}
	if !r.RevokedAt.IsZero() {
		t.RevokeTime = timestamppb.New(r.RevokedAt)
	}
	return t
}

// ListAPITokens lists every token for an admin, and the caller's own
// (those it created) otherwise.
func (s *Service) ListAPITokens(ctx context.Context, req *meridianv1.ListAPITokensRequest) (*meridianv1.ListAPITokensResponse, error) {
	ts, err := s.tokens()
	if err != nil {
		return nil, err
	}
	size, err := pageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	after := req.GetPageToken()
	if after != "" && !auth.ValidTokenID(after) {
		return nil, invalid("page_token", "is not a token this server issued")
	}
	recs, err := ts.List(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "list API tokens: %v", err)
	}
	c := callerFrom(ctx)
	all := c == nil || !c.Decision.OwnOnly
	out := &meridianv1.ListAPITokensResponse{}
	for _, r := range recs { // ordered by id
		if r.ID <= after || (!all && r.CreatedBy != c.Principal.User) {
			continue
		}
		if len(out.Tokens) == size {
			out.NextPageToken = out.Tokens[len(out.Tokens)-1].GetId()
			break
		}
		out.Tokens = append(out.Tokens, tokenProto(r))
	}
	return out, nil
}

// RevokeAPIToken revokes a token (the guard checked it is the caller's or
// the caller is admin).
func (s *Service) RevokeAPIToken(ctx context.Context, req *meridianv1.RevokeAPITokenRequest) (*meridianv1.APIToken, error) {
	ts, err := s.tokens()
	if err != nil {
		return nil, err
	}
	by := "local-admin"
	if c := callerFrom(ctx); c != nil {
		by = c.Principal.User
	}
	if err := ts.Revoke(ctx, req.GetId(), by); err != nil {
		if errors.Is(err, auth.ErrTokenNotFound) {
			return nil, status.Error(codes.NotFound, authz.TokenNotFound(req.GetId()))
		}
		return nil, status.Errorf(codes.Internal, "revoke API token: %v", err)
	}
	rec, err := ts.Get(ctx, req.GetId())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "revoke API token: %v", err)
	}
	return tokenProto(rec), nil
}

// ListAuditEvents reads the etcd audit log (the guard checked audit.read).
func (s *Service) ListAuditEvents(ctx context.Context, req *meridianv1.ListAuditEventsRequest) (*meridianv1.ListAuditEventsResponse, error) {
	if !s.d.AuditLog {
		return nil, status.Error(codes.Unimplemented, "the audit log is not kept in etcd on this hub")
	}
	size, err := pageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	f := audit.Filter{User: req.GetUser(), Verb: req.GetVerb(), Target: req.GetTarget(), Result: req.GetResult()}
	if req.GetSince() != nil {
		f.Since = req.GetSince().AsTime()
	}
	if req.GetUntil() != nil {
		f.Until = req.GetUntil().AsTime()
	}
	evs, next, err := audit.List(ctx, s.cli, f, size, req.GetPageToken())
	if errors.Is(err, audit.ErrBadPageToken) {
		return nil, invalid("page_token", "is not a token this server issued")
	}
	if err != nil {
		return nil, storeErr("list audit events", err)
	}
	return &meridianv1.ListAuditEventsResponse{Events: evs, NextPageToken: next}, nil
}
