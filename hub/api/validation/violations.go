package validation

import (
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// collector gathers field violations in the order they are found.
type collector struct {
	list []*errdetails.BadRequest_FieldViolation
}

func (c *collector) add(field, format string, args ...any) {
	c.list = append(c.list, &errdetails.BadRequest_FieldViolation{
		Field:       field,
		Description: fmt.Sprintf(format, args...),
	})
}

// err returns nil when nothing was collected, and otherwise an
// InvalidArgument status carrying a BadRequest detail. what names the
// object, for example "workload".
func (c *collector) err(what string) error {
	if len(c.list) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "invalid %s: ", what)
	if len(c.list) == 1 {
		b.WriteString("1 problem: ")
	} else {
		fmt.Fprintf(&b, "%d problems: ", len(c.list))
	}
	for i, v := range c.list {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(v.GetField())
		b.WriteString(": ")
		b.WriteString(v.GetDescription())
	}
	st := status.New(codes.InvalidArgument, b.String())
	withDetails, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: c.list})
	if err != nil {
		// Only possible if the detail cannot be marshalled; the message
		// still lists every violation.
		return st.Err()
	}
	return withDetails.Err()
}

// ViolationsError is the error ValidateWorkload returns, for violations
// gathered elsewhere (a batch of workloads): INVALID_ARGUMENT listing each
// one in its message and as a BadRequest field violation, or nil for none.
// what names the object, for example "workloads".
func ViolationsError(what string, vs []*errdetails.BadRequest_FieldViolation) error {
	return (&collector{list: vs}).err(what)
}

// FieldViolations returns the field violations carried by an error from
// ValidateWorkload or ValidateQueue (or any gRPC status error with a
// BadRequest detail), also when the error is wrapped. It returns nil for a
// nil error or one without violations.
func FieldViolations(err error) []*errdetails.BadRequest_FieldViolation {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	var out []*errdetails.BadRequest_FieldViolation
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			out = append(out, br.GetFieldViolations()...)
		}
	}
	return out
}

// Path helpers: proto field names joined with dots, indexes in brackets,
// map keys quoted in brackets.

func join(parent, field string) string {
	if parent == "" {
		return field
	}
	return parent + "." + field
}

func index(parent string, i int) string {
	return parent + "[" + strconv.Itoa(i) + "]"
}

func key(parent, k string) string {
	return parent + "[" + strconv.Quote(k) + "]"
}
