package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// about names what a call acted on, for diagnostics: the Terraform type
// and the object's id ("meridian_queue acme/vision"), and how the hub's
// field paths map to attribute paths.
type about struct {
	typ, id string
	// field maps a hub field path (proto names, "quotas[0].borrow_limit_milli")
	// to the attribute path and its name in HCL; ok false when it has none.
	field func(hubField string) (p path.Path, name string, ok bool)
}

func (a about) String() string {
	if a.id == "" {
		return a.typ
	}
	return a.typ + " " + a.id
}

// addErr turns an error of a hub call into diagnostics that name the
// resource and, where the hub named one, the attribute. action says what
// was tried ("create", "update", "read").
func addErr(diags *diag.Diagnostics, hub *hubClient, a about, action string, err error) {
	st, ok := status.FromError(err)
	if !ok {
		if errors.Is(err, context.DeadlineExceeded) {
			diags.AddError(fmt.Sprintf("%s: %s timed out", a, action), err.Error())
			return
		}
		diags.AddError(fmt.Sprintf("%s: %s failed", a, action), err.Error())
		return
	}
	summary := fmt.Sprintf("%s: %s %s", a, action, codeWords(st.Code()))
	msg := st.Message()
	switch st.Code() {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		if addViolations(diags, st, a, summary) {
			return
		}
	case codes.Unauthenticated:
		msg += "\n\nThe hub did not accept the provider's token. Check the provider's token (or MERIDIAN_TOKEN): it may be mistyped, expired or revoked."
	case codes.PermissionDenied:
		msg += "\n\nThe token is valid but lacks the permission or queue verb named above (docs/security.md lists them)."
	case codes.Unavailable:
		if hub != nil {
			msg = fmt.Sprintf("cannot reach the hub at %s: %s\n\nCheck the provider's endpoint (or MERIDIAN_ENDPOINT) and, with TLS, ca_file.", hub.endpoint, msg)
		}
	case codes.Aborted:
		msg += "\n\nAnother change raced this one on the hub; run the apply again."
	}
	if st.Code() == codes.AlreadyExists {
		msg += fmt.Sprintf("\n\nTo manage the existing object, import it: terraform import <address> %s", a.id)
	}
	diags.AddError(summary, msg)
}

// addViolations adds one attribute diagnostic per field the hub named;
// false when the status has none.
func addViolations(diags *diag.Diagnostics, st *status.Status, a about, summary string) bool {
	var vs []*errdetails.BadRequest_FieldViolation
	var conflict bool
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.BadRequest:
			vs = append(vs, d.GetFieldViolations()...)
		case *errdetails.PreconditionFailure:
			for _, v := range d.GetViolations() {
				conflict = conflict || v.GetType() == "ETAG_MISMATCH"
			}
		}
	}
	if len(vs) == 0 {
		return false
	}
	for _, v := range vs {
		detail := v.GetDescription()
		if conflict || v.GetField() == "revision" {
			diags.AddAttributeError(path.Root("revision"), summary+": changed outside Terraform",
				fmt.Sprintf("%s\n\n%s was changed by someone else since Terraform last read it, so this apply stopped rather than overwrite that change. Run terraform plan (or apply) again: it reads the current state and shows what would change.", detail, a))
			continue
		}
		if a.field != nil {
			if p, name, ok := a.field(v.GetField()); ok {
				diags.AddAttributeError(p, summary, fmt.Sprintf("%s: %s", name, detail))
				continue
			}
		}
		if f := v.GetField(); f != "" {
			detail = f + ": " + detail
		}
		diags.AddError(summary, detail)
	}
	return true
}

// codeWords says a status code in words for a diagnostic's summary.
func codeWords(c codes.Code) string {
	switch c {
	case codes.InvalidArgument, codes.OutOfRange:
		return "refused: invalid value"
	case codes.NotFound:
		return "failed: not found"
	case codes.AlreadyExists:
		return "failed: it already exists"
	case codes.PermissionDenied:
		return "refused: permission denied"
	case codes.Unauthenticated:
		return "refused: not authenticated"
	case codes.FailedPrecondition:
		return "refused"
	case codes.Unavailable:
		return "failed: hub unreachable"
	case codes.DeadlineExceeded:
		return "timed out"
	case codes.Aborted:
		return "failed: conflict"
	}
	return "failed: " + strings.ToLower(strings.ReplaceAll(c.String(), "_", " "))
}
