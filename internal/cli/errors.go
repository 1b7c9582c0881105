package cli

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"

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
	// allowed to do this), or an exec credential plugin failed.
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
	// action is what the call tried, for a permission denied message:
	// "submit to queue acme/vision", "cancel workload wl-1". Empty: made
	// from kind and id.
	action string
}

// act returns o with the action of a permission denied message set to
// verb followed by the object ("cancel workload wl-1").
func (o object) act(verb string) object {
	o.action = verb + " " + o.String()
	return o
}

// actionText is what the call tried, in words.
func (o object) actionText() string {
	if o.action != "" {
		return o.action
	}
	switch o.kind {
	case "workload list":
		return "list workloads"
	case "queue list":
		return "list queues"
	case "cluster list":
		return "list clusters"
	case "workload watch":
		return "watch workloads"
	case "hub health":
		return "read the hub's health"
	}
	return "access " + o.String()
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
		if hint := a.transportHint(msg); hint != "" {
			return wrap(ExitUnavailable, hint)
		}
		if a.unreachable(msg) {
			return wrap(ExitUnavailable, a.cannotReach())
		}
		return wrap(ExitUnavailable, fmt.Sprintf("the hub at %s is unavailable: %s; try again shortly", a.hub, msg))
	case codes.DeadlineExceeded:
		if hint := a.transportHint(msg); hint != "" {
			return wrap(ExitUnavailable, hint)
		}
		if a.unreachable(msg) {
			return wrap(ExitUnavailable, a.cannotReach())
		}
		return wrap(ExitUnavailable, fmt.Sprintf("the hub at %s did not answer within %s (raise --timeout)", a.hub, a.timeout))
	case codes.Unauthenticated:
		return wrap(ExitDenied, a.unauthenticatedText(msg))
	case codes.PermissionDenied:
		return wrap(ExitDenied, a.deniedText(ctx, err, about))
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

// unauthenticatedText explains an Unauthenticated answer: what the hub
// said and what to check. It never includes the token.
func (a *app) unauthenticatedText(msg string) string {
	if msg == "" {
		msg = "no reason given"
	}
	if a.settings != nil && !a.settings.hasCredentials() {
		return fmt.Sprintf("the hub did not accept your credentials: %s; none were sent: set --token, --token-file or %s, choose a context that has credentials (--context, 'meridianctl config get-contexts'), or point %s at a configuration file that has one (the demo prints its export line)", msg, TokenEnv, ConfigEnv)
	}
	src := ""
	if a.settings != nil {
		src = " (token from " + a.settings.credentialSource() + ")"
	}
	return fmt.Sprintf("the hub did not accept your credentials%s: %s; log in again or check --token/--context", src, msg)
}

// deniedText explains a PermissionDenied answer as "you (USER) may not
// VERB TARGET: REASON". The user, verb and target come from the status's
// ErrorInfo metadata (keys user, verb, target) when the hub sends them;
// else the user from WhoAmI (best effort) and the verb and target from
// what the command asked.
func (a *app) deniedText(ctx context.Context, err error, about object) string {
	st, _ := status.FromError(err)
	msg := st.Message()
	var user, verb, target string
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			md := info.GetMetadata()
			user, verb, target = md["user"], md["verb"], md["target"]
		}
	}
	if user == "" {
		user = a.whoAmIUser(ctx)
	}
	you := "you"
	if user != "" {
		you = "you (" + user + ")"
	}
	if rest, ok := strings.CutPrefix(msg, "you may not "); ok {
		// The hub's reason already says what was refused.
		return you + " may not " + rest
	}
	action := about.actionText()
	if verb != "" && target != "" {
		action = verb + " " + target
	}
	if msg == "" {
		msg = "permission denied"
	}
	return fmt.Sprintf("%s may not %s: %s", you, action, msg)
}

// whoAmIUser asks the hub who the caller is, for an error message; "" when
// that fails too.
func (a *app) whoAmIUser(ctx context.Context) string {
	if a.conn == nil || ctx.Err() != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, min(a.timeout, 3*time.Second))
	defer cancel()
	resp, err := meridianv1.NewAdminServiceClient(a.conn).WhoAmI(ctx, &meridianv1.WhoAmIRequest{})
	if err != nil {
		return ""
	}
	return resp.GetPrincipal().GetUser()
}

// transportHint explains a failed TLS handshake or a TLS/plaintext
// mismatch; "" when msg is about something else.
func (a *app) transportHint(msg string) string {
	m := strings.ToLower(msg)
	tlsOn := a.settings != nil && a.settings.tls
	switch {
	case strings.Contains(m, "certificate signed by unknown authority"), strings.Contains(m, "certificate is not trusted"):
		return fmt.Sprintf("the hub at %s presented a certificate meridianctl does not trust; pass --ca with the CA bundle that signed it (%s)", a.hub, tlsDetail(msg))
	case strings.Contains(m, "certificate is valid for"), strings.Contains(m, "doesn't contain any ip sans"), strings.Contains(m, "not valid for any names"):
		return fmt.Sprintf("the hub's certificate does not name %s; use the name it was issued for in --hub, or --tls-server-name (%s)", a.hub, tlsDetail(msg))
	case strings.Contains(m, "certificate has expired"), strings.Contains(m, "not yet valid"):
		return fmt.Sprintf("the hub's certificate is expired or not yet valid (%s)", tlsDetail(msg))
	case strings.Contains(m, "first record does not look like a tls handshake"):
		return fmt.Sprintf("the hub at %s does not speak TLS; drop --tls/--ca/--cert (or tls in the context), or check the port", a.hub)
	case strings.Contains(m, "certificate required"), strings.Contains(m, "bad certificate"), strings.Contains(m, "unknown certificate authority"):
		if a.settings != nil && a.settings.cert != "" {
			return fmt.Sprintf("the hub at %s refused the client certificate %s (%s)", a.hub, a.settings.cert, tlsDetail(msg))
		}
		return fmt.Sprintf("the hub at %s requires a client certificate; pass --cert and --key (%s)", a.hub, tlsDetail(msg))
	case tlsOn && (strings.Contains(m, "broken pipe") || strings.Contains(m, "connection reset")):
		// TLS 1.3: a server that wants a client certificate may hang up
		// before its alert is read.
		if a.settings.cert == "" {
			return fmt.Sprintf("the hub at %s dropped the TLS connection; if it requires a client certificate, pass --cert and --key (%s)", a.hub, msg)
		}
		return ""
	case !tlsOn && (strings.Contains(m, "server preface") || strings.Contains(m, "http2: frame too large")):
		return fmt.Sprintf("the hub at %s closed the connection before answering; if it serves TLS, add --tls or --ca", a.hub)
	}
	return ""
}

// tlsDetail keeps the interesting end of a transport error.
func tlsDetail(msg string) string {
	if i := strings.Index(msg, "tls: "); i >= 0 {
		return msg[i:]
	}
	if i := strings.Index(msg, "x509: "); i >= 0 {
		return msg[i:]
	}
	return msg
}
