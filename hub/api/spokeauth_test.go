package api

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridian-gpu/meridian/hub/spokeauth"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// spokeStub answers like hub/spokeauth for one registered cluster, "east";
// the real authority runs in hub/spokeauth's and internal/e2e/security's
// tests against a real NATS.
type spokeStub struct{ key string }

func (s spokeStub) Register(_ context.Context, id string, rotate bool) (*spokeauth.Issued, error) {
	if id == "east" && !rotate {
		return nil, fmt.Errorf("%w: east", spokeauth.ErrExists)
	}
	return &spokeauth.Issued{Cluster: id, Credential: spokeauth.Credential{PublicKey: s.key, IssuedAt: time.Unix(1, 0)}, Creds: []byte("creds"), InboxPrefix: "_INBOX_" + id}, nil
}

func (s spokeStub) Get(_ context.Context, id string) (*spokeauth.Record, error) {
	if id != "east" {
		return nil, fmt.Errorf("%w: cluster %s is not registered", spokeauth.ErrNotFound, id)
	}
	return &spokeauth.Record{Cluster: id, Credentials: []spokeauth.Credential{{PublicKey: s.key, IssuedAt: time.Unix(1, 0), RevokedAt: time.Unix(2, 0)}}}, nil
}

func (s spokeStub) Revoke(_ context.Context, id, key string) ([]spokeauth.Credential, error) {
	if _, err := s.Get(context.Background(), id); err != nil {
		return nil, err
	}
	return []spokeauth.Credential{{PublicKey: s.key, IssuedAt: time.Unix(1, 0), RevokedAt: time.Unix(2, 0)}}, nil
}

func TestClusterCredentialRPCs(t *testing.T) {
	u, _ := nkeys.CreateUser()
	key, _ := u.PublicKey()
	ctx := context.Background()
	off := newEnv(t)
	if _, err := off.cs.RegisterCluster(ctx, &meridianv1.RegisterClusterRequest{Id: "east"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("RegisterCluster on a hub that issues no credentials: %v, want FAILED_PRECONDITION", err)
	}
	e := newEnv(t, func(d *Deps) { d.SpokeAuth = spokeStub{key: key} })
	for name, tc := range map[string]struct {
		call  func() error
		code  codes.Code
		field string
	}{
		"register bad id": {func() error {
			_, err := e.cs.RegisterCluster(ctx, &meridianv1.RegisterClusterRequest{Id: "East.1"})
			return err
		}, codes.InvalidArgument, "id"},
		"register twice": {func() error {
			_, err := e.cs.RegisterCluster(ctx, &meridianv1.RegisterClusterRequest{Id: "east"})
			return err
		}, codes.AlreadyExists, "id"},
		"list unknown": {func() error {
			_, err := e.cs.ListClusterCredentials(ctx, &meridianv1.ListClusterCredentialsRequest{Id: "west"})
			return err
		}, codes.NotFound, ""},
		"revoke without key or all": {func() error {
			_, err := e.cs.RevokeClusterCredentials(ctx, &meridianv1.RevokeClusterCredentialsRequest{Id: "east"})
			return err
		}, codes.InvalidArgument, "public_key"},
		"revoke key and all": {func() error {
			_, err := e.cs.RevokeClusterCredentials(ctx, &meridianv1.RevokeClusterCredentialsRequest{Id: "east", PublicKey: key, All: true})
			return err
		}, codes.InvalidArgument, "all"},
		"revoke a bad key": {func() error {
			_, err := e.cs.RevokeClusterCredentials(ctx, &meridianv1.RevokeClusterCredentialsRequest{Id: "east", PublicKey: "AB"})
			return err
		}, codes.InvalidArgument, "public_key"},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.call()
			if status.Code(err) != tc.code {
				t.Fatalf("err = %v, want %s", err, tc.code)
			}
			if tc.field != "" && !slices.Contains(fields(err), tc.field) {
				t.Fatalf("err = %v names %v, want %s", err, fields(err), tc.field)
			}
		})
	}
	r, err := e.cs.RegisterCluster(ctx, &meridianv1.RegisterClusterRequest{Id: "east", Rotate: true})
	if err != nil || r.GetNatsCreds() != "creds" || r.GetCredential().GetPublicKey() != key || r.GetInboxPrefix() != "_INBOX_east" {
		t.Fatalf("rotate: %v, %v", r, err)
	}
	l, err := e.cs.ListClusterCredentials(ctx, &meridianv1.ListClusterCredentialsRequest{Id: "east"})
	if err != nil || len(l.GetCredentials()) != 1 || l.GetCredentials()[0].GetRevokeTime() == nil {
		t.Fatalf("list: %v, %v", l, err)
	}
	rv, err := e.cs.RevokeClusterCredentials(ctx, &meridianv1.RevokeClusterCredentialsRequest{Id: "east", All: true})
	if err != nil || len(rv.GetRevoked()) != 1 {
		t.Fatalf("revoke: %v, %v", rv, err)
	}
}
