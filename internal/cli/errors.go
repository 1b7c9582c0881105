package cli

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/meridian-gpu/meridian/hub/api/validation"
)

// Exit codes, one per class of error, so scripts can tell them apart.
const (
	// ExitOK: the command did what was asked.
	ExitOK = 0
	// ExitError: an unexpected failure (a hub-side fault, an odd answer).
	ExitError = 1
	// ExitUsage: bad command line (unknown command or flag, missing
	// argument, unreadable file).
	ExitUsage = 2
	// ExitInvalid: the input was rejected (decode error, field
	// violations, failed precondition).
	ExitInvalid = 3
	// ExitNotFound: the named workload, queue or cluster does not exist.
	ExitNotFound = 4
	// ExitConflict: the object already exists or changed under us.
	ExitConflict = 5
	// ExitUnavailable: the hub could not be reached or did not answer in
	// time.
	ExitUnavailable = 6
	// ExitDenied: the hub refused the caller's credentials: gRPC
	// Unauthenticated (no or bad credentials) or PermissionDenied (not
	// allowed to do this). The hub does not check credentials yet; the
	// code is reserved so scripts need not change when it does.
	ExitDenied = 7
	// ExitInterrupted: the user interrupted the command (Ctrl-C).
	ExitInterrupted = 130
)

// exitError is an error with the exit code that reports it.
type exitError struct {
	code int
	msg  string
	err  error
}

func (e *exitError) Error() string { return e.msg }
func (e *exitError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &exitError{code: ExitUsage, msg: fmt.Sprintf(format, args...)}
}

func invalidErrorf(format string, args ...any) error {
	return &exitError{code: ExitInvalid, msg: fmt.Sprintf(format, args...)}
}

// ExitCode returns the exit code Main reports for err.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return ExitError
}

// violationsText formats field violations one per line, indented, after a
// headline such as "the hub rejected the workload".
func violationsText(headline string, err error) (string, bool) {
	vs := validation.FieldViolations(err)
	if len(vs) == 0 {
		return "", false
	}
	var b strings.Builder
	b.WriteString(headline)
	if len(vs) == 1 {
		b.WriteString(" (1 problem):")
	} else {
		fmt.Fprintf(&b, " (%d problems):", len(vs))
	}
	for _, v := range vs {
		b.WriteString("\n  ")
		if v.GetField() != "" {
			b.WriteString(v.GetField())
			b.WriteString(": ")
		}
		b.WriteString(v.GetDescription())
	}
	return b.String(), true
}

// object names what a call was about, for error messages: kind is
// "workload", "queue" or "cluster"; id may be empty.
type object struct {
	kind string
	id   string
	// idField is the request field that carried id ("id", "path"), for a
	// call that looks one object up. A field violation on it alone means
	// the id cannot name an object, so it reads as not found.
	idField string
	// tooBig is the hint shown when the hub's answer exceeds the client's
	// receive limit, for example "use a smaller --limit".
	tooBig string
}

// lookup is the object of a call that names one object by its id field.
func lookup(kind, id, idField string) object {
	return object{kind: kind, id: id, idField: idField}
}

func (o object) String() string {
	if o.id == "" {
		return o.kind
	}
	return o.kind + " " + o.id
}

// rpcError turns an error from a call to the hub into an exitError whose
// message tells the user what to do. ctx is the caller's context (not the
// per-call one), to tell an interrupt from a timeout.
func (a *app) rpcError(ctx context.Context, err error, about object) error {
	if err == nil {
		return nil
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	if ctx.Err() != nil {
		return &exitError{code: ExitInterrupted, msg: "interrupted", err: err}
	}
	st, ok := status.FromError(err)
	if !ok {
		if errors.Is(err, context.DeadlineExceeded) {
			st = status.New(codes.DeadlineExceeded, err.Error())
		} else {
			return &exitError{code: ExitError, msg: fmt.Sprintf("%s: %v", about, err), err: err}
		}
	}
	msg := st.Message()
	wrap := func(code int, text string) error {
		return &exitError{code: code, msg: text, err: err}
	}
	switch st.Code() {
	case codes.InvalidArgument:
		if about.id != "" && about.idField != "" {
			if vs := validation.FieldViolations(err); len(vs) == 1 && vs[0].GetField() == about.idField {
				// "nope" is no workload id, so no workload has it.
				return wrap(ExitNotFound, fmt.Sprintf("%s not found: %s", about, vs[0].GetDescription()))
			}
		}
		if text, ok := violationsText("the hub rejected the "+about.kind, err); ok {
			return wrap(ExitInvalid, text)
		}
		return wrap(ExitInvalid, fmt.Sprintf("the hub rejected the %s: %s", about.kind, msg))
	case codes.NotFound:
		if about.id != "" {
			return wrap(ExitNotFound, fmt.Sprintf("%s not found", about))
		}
		return wrap(ExitNotFound, fmt.Sprintf("not found: %s", msg))
	case codes.AlreadyExists:
		return wrap(ExitConflict, fmt.Sprintf("%s already exists: %s", about, msg))
	case codes.Aborted:
		return wrap(ExitConflict, fmt.Sprintf("%s changed while the hub was updating it; run the command again (%s)", about, msg))
	case codes.FailedPrecondition:
		if about.id == "" {
			if text, ok := violationsText("the hub refused the "+about.kind, err); ok {
				return wrap(ExitInvalid, text)
			}
		}
		if about.id != "" && strings.Contains(msg, about.id) {
			return wrap(ExitInvalid, msg)
		}
		return wrap(ExitInvalid, fmt.Sprintf("%s: %s", about, msg))
	case codes.Unavailable:
		if a.unreachable(msg) {
			return wrap(ExitUnavailable, a.cannotReach())
		}
		return wrap(ExitUnavailable, fmt.Sprintf("the hub at %s is unavailable: %s; try again shortly", a.hub, msg))
	case codes.DeadlineExceeded:
		if a.unreachable(msg) {
			return wrap(ExitUnavailable, a.cannotReach())
		}
		return wrap(ExitUnavailable, fmt.Sprintf("the hub at %s did not answer within %s (raise --timeout)", a.hub, a.timeout))
	case codes.Unauthenticated:
		return wrap(ExitDenied, fmt.Sprintf("the hub refused the credentials (unauthenticated): %s", msg))
	case codes.PermissionDenied:
		return wrap(ExitDenied, fmt.Sprintf("the hub refused the request (permission denied): %s", msg))
	case codes.ResourceExhausted:
		if m := tooLarge.FindStringSubmatch(msg); m != nil {
			return wrap(ExitError, tooLargeText(about, m[1], m[2]))
		}
		return wrap(ExitError, fmt.Sprintf("hub error (%s) on %s: %s", codeWords(st.Code()), about, msg))
	case codes.Unimplemented:
		return wrap(ExitError, fmt.Sprintf("the hub at %s does not support this call (%s); is it an older version than meridianctl %s?", a.hub, msg, Version))
	case codes.Canceled:
		return wrap(ExitInterrupted, "interrupted")
	default:
		return wrap(ExitError, fmt.Sprintf("hub error (%s) on %s: %s", codeWords(st.Code()), about, msg))
	}
}

// tooLarge matches gRPC's message for an answer above the receive limit:
// "grpc: received message larger than max (5614302 vs. 4194304)".
var tooLarge = regexp.MustCompile(`received message (?:larger than max|after decompression larger than max) \((\d+) vs\. (\d+)\)`)

// isTooLarge reports whether err is the client refusing an answer above
// its receive limit.
func isTooLarge(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.ResourceExhausted && tooLarge.MatchString(st.Message())
}

func tooLargeText(about object, got, limit string) string {
	hint := about.tooBig
	if hint == "" {
		hint = "ask for less, or use -o json on a narrower request"
	}
	return fmt.Sprintf("the hub's answer to the %s is %s, larger than meridianctl accepts (%s); %s", about, byteSize(got), byteSize(limit), hint)
}

// byteSize formats a decimal byte count from an error message as MiB.
func byteSize(s string) string {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return s + " bytes"
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

func (a *app) cannotReach() string {
	return fmt.Sprintf("cannot reach the hub at %s: is meridian-hub running? (set --hub or %s)", a.hub, HubEnv)
}

// unreachable reports whether a call failed because no connection to the
// hub could be made (as opposed to the hub answering "unavailable").
func (a *app) unreachable(msg string) bool {
	if a.conn != nil {
		switch a.conn.GetState() {
		case connectivity.TransientFailure, connectivity.Connecting, connectivity.Idle:
			return true
		}
	}
	for _, s := range []string{"connection refused", "connection error", "error while dialing", "no such host", "name resolver", "produced zero addresses"} {
		if strings.Contains(strings.ToLower(msg), s) {
			return true
		}
	}
	return false
}

// codeWords spells a gRPC code in lower-case words: ResourceExhausted ->
// "resource exhausted".
func codeWords(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte(' ')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
