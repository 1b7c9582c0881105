package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// IfMatchHeader is the HTTP precondition header UpdateQueue and DeleteQueue
// honour; the gateway passes it as gRPC metadata "if-match", which gRPC
// clients may send too.
const IfMatchHeader = "If-Match"

// etagMismatchType marks the PreconditionFailure of an If-Match mismatch;
// the gateway answers it with 412.
const etagMismatchType = "ETAG_MISMATCH"

// queueETag is the ETag of a queue: its spec revision, quoted.
func queueETag(rev int64) string { return strconv.Quote(strconv.FormatInt(rev, 10)) }

// setETag is a gateway forward-response option: queue responses carry an
// ETag with the queue's spec revision.
func setETag(_ context.Context, w http.ResponseWriter, m proto.Message) error {
	if q, ok := m.(*meridianv1.Queue); ok && q.GetRevision() > 0 {
		w.Header().Set("ETag", queueETag(q.GetRevision()))
	}
	return nil
}

// ifMatch returns the If-Match values the caller sent, nil when none.
func ifMatch(ctx context.Context) []string {
	var out []string
	for _, v := range metadata.ValueFromIncomingContext(ctx, "if-match") {
		for _, part := range strings.Split(v, ",") {
			if p := strings.TrimSpace(part); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// checkIfMatch compares the caller's If-Match values with the queue's spec
// revision; `*` matches any existing queue. It returns nil when there is no
// If-Match or one value matches.
func checkIfMatch(ctx context.Context, path string, rev int64) error {
	vals := ifMatch(ctx)
	if len(vals) == 0 {
		return nil
	}
	for _, v := range vals {
		if v == "*" {
			return nil
		}
		v = strings.TrimPrefix(v, "W/")
		if u, err := strconv.Unquote(v); err == nil {
			v = u
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n == rev {
			return nil
		}
	}
	desc := fmt.Sprintf("queue %s is at ETag %s, not %s; read it again and retry", path, queueETag(rev), strings.Join(vals, ", "))
	st := status.New(codes.FailedPrecondition, IfMatchHeader+": "+desc)
	if d, err := st.WithDetails(
		&errdetails.PreconditionFailure{Violations: []*errdetails.PreconditionFailure_Violation{{Type: etagMismatchType, Subject: "queues/" + path, Description: desc}}},
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: IfMatchHeader, Description: desc}}},
	); err == nil {
		return d.Err()
	}
	return st.Err()
}

// isETagMismatch reports whether err is checkIfMatch's refusal.
func isETagMismatch(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return false
	}
	for _, d := range st.Details() {
		if pf, ok := d.(*errdetails.PreconditionFailure); ok {
			for _, v := range pf.GetViolations() {
				if v.GetType() == etagMismatchType {
					return true
				}
			}
		}
	}
	return false
}
