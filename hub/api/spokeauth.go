package api

import (
	"context"
	"errors"
	"strings"

	"github.com/nats-io/nkeys"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/spokeauth"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// SpokeAuthority issues, lists and revokes clusters' NATS credentials
// (hub/spokeauth.Authority implements it). Each call may block on etcd
// and NATS until ctx ends; errors wrap the spokeauth sentinels.
type SpokeAuthority interface {
	Register(ctx context.Context, cluster string, rotate bool) (*spokeauth.Issued, error)
	Get(ctx context.Context, cluster string) (*spokeauth.Record, error)
	Revoke(ctx context.Context, cluster, publicKey string) ([]spokeauth.Credential, error)
}

func (s *Service) spokeAuth() (SpokeAuthority, error) {
	if s.d.SpokeAuth == nil {
		return nil, status.Error(codes.FailedPrecondition, "this hub issues no NATS credentials: run it with --nats-spoke-auth "+
			"(embedded NATS) or --nats-operator-signing-key and --nats-system-creds (external NATS); see docs/operators.md")
	}
	return s.d.SpokeAuth, nil
}

// RegisterCluster records a cluster and issues its agent a credential.
func (s *Service) RegisterCluster(ctx context.Context, req *meridianv1.RegisterClusterRequest) (*meridianv1.RegisterClusterResponse, error) {
	if err := checkClusterID(req.GetId()); err != nil {
		return nil, err
	}
	sa, err := s.spokeAuth()
	if err != nil {
		return nil, err
	}
	is, err := sa.Register(ctx, req.GetId(), req.GetRotate())
	if err != nil {
		return nil, spokeErr("register cluster "+req.GetId(), err)
	}
	return &meridianv1.RegisterClusterResponse{
		ClusterId: is.Cluster, Credential: credentialPB(is.Credential),
		NatsCreds: string(is.Creds), InboxPrefix: is.InboxPrefix,
	}, nil
}

// ListClusterCredentials lists a registered cluster's credentials.
func (s *Service) ListClusterCredentials(ctx context.Context, req *meridianv1.ListClusterCredentialsRequest) (*meridianv1.ListClusterCredentialsResponse, error) {
	if err := checkClusterID(req.GetId()); err != nil {
		return nil, err
	}
	sa, err := s.spokeAuth()
	if err != nil {
		return nil, err
	}
	rec, err := sa.Get(ctx, req.GetId())
	if err != nil {
		return nil, spokeErr("list credentials of cluster "+req.GetId(), err)
	}
	out := &meridianv1.ListClusterCredentialsResponse{}
	for _, c := range rec.Credentials {
		out.Credentials = append(out.Credentials, credentialPB(c))
	}
	return out, nil
}

// RevokeClusterCredentials revokes one or all of a cluster's credentials.
func (s *Service) RevokeClusterCredentials(ctx context.Context, req *meridianv1.RevokeClusterCredentialsRequest) (*meridianv1.RevokeClusterCredentialsResponse, error) {
	if err := checkClusterID(req.GetId()); err != nil {
		return nil, err
	}
	key := req.GetPublicKey()
	switch {
	case key == "" && !req.GetAll():
		return nil, invalid("public_key", "is required; or set all to revoke every credential of the cluster")
	case key != "" && req.GetAll():
		return nil, invalid("all", "cannot be combined with public_key")
	case key != "" && !nkeys.IsValidPublicUserKey(key):
		return nil, invalid("public_key", "is not a public user nkey (U...)")
	}
	sa, err := s.spokeAuth()
	if err != nil {
		return nil, err
	}
	revoked, err := sa.Revoke(ctx, req.GetId(), key)
	if err != nil {
		return nil, spokeErr("revoke credentials of cluster "+req.GetId(), err)
	}
	out := &meridianv1.RevokeClusterCredentialsResponse{}
	for _, c := range revoked {
		out.Revoked = append(out.Revoked, credentialPB(c))
	}
	return out, nil
}

func credentialPB(c spokeauth.Credential) *meridianv1.ClusterCredential {
	pb := &meridianv1.ClusterCredential{PublicKey: c.PublicKey, IssueTime: timestamppb.New(c.IssuedAt)}
	if !c.Active() {
		pb.RevokeTime = timestamppb.New(c.RevokedAt)
	}
	return pb
}

// spokeErr maps spokeauth's errors to statuses. Its messages carry no
// secret (the package never puts a seed in an error).
func spokeErr(op string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "spokeauth: ")
	switch {
	case errors.Is(err, spokeauth.ErrExists):
		return fieldError(codes.AlreadyExists, "id", "%s", msg)
	case errors.Is(err, spokeauth.ErrNotFound):
		return status.Errorf(codes.NotFound, "%s: %s", op, msg)
	case errors.Is(err, spokeauth.ErrInvalid):
		return status.Errorf(codes.InvalidArgument, "%s: %s", op, msg)
	case errors.Is(err, spokeauth.ErrTooMany):
		return status.Errorf(codes.FailedPrecondition, "%s: %s", op, msg)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return storeErr(op, err)
	}
	return status.Errorf(codes.Unavailable, "%s: %s", op, msg)
}
