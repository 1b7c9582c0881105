package api

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fieldError returns a status with code c whose BadRequest detail names
// field; message is the plain-words problem.
func fieldError(c codes.Code, field, format string, args ...any) error {
	desc := fmt.Sprintf(format, args...)
	st := status.New(c, field+": "+desc)
	if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: desc}}}); err == nil {
		return d.Err()
	}
	return st.Err()
}

// invalid is an InvalidArgument naming field.
func invalid(field, format string, args ...any) error {
	return fieldError(codes.InvalidArgument, field, format, args...)
}

// storeErr maps a store or etcd error to a gRPC status, keeping the cause
// in the message.
func storeErr(op string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Errorf(codes.Canceled, "%s: %v", op, err)
	case errors.Is(err, context.DeadlineExceeded):
		return status.Errorf(codes.DeadlineExceeded, "%s: %v", op, err)
	case errors.Is(err, rpctypes.ErrNoLeader), errors.Is(err, rpctypes.ErrTimeout):
		return status.Errorf(codes.Unavailable, "%s: etcd unavailable: %v", op, err)
	}
	// etcd client errors are gRPC statuses; keep a meaningful code.
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown && st.Code() != codes.OK {
		return status.Errorf(st.Code(), "%s: %v", op, err)
	}
	return status.Errorf(codes.Unavailable, "%s: %v", op, err)
}
