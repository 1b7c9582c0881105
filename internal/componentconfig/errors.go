package componentconfig

import (
	"errors"
	"fmt"
	"strings"
)

// FieldError is one problem with one setting. Path is the setting's YAML
// path ("retention.ttl", "auth.oidc.issuers[1].issuerURL"); Detail says
// what is wrong, without repeating the path. Origin, filled in by the
// Loader, says where the value came from so that the message can point
// there.
type FieldError struct {
	Path   string
	Detail string
	Origin Origin
}

// Error renders the error as
//
//	hub.yaml:12: retention.ttl: must be ...          (from a file)
//	retention.ttl (--retention-ttl): must be ...     (from a flag)
//	retention.ttl (env MERIDIAN_RETENTION_TTL="12h"): must be ...
func (e *FieldError) Error() string {
	var b strings.Builder
	switch e.Origin.Kind {
	case FromFile:
		b.WriteString(e.Origin.Name)
		if e.Origin.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Origin.Line)
		}
		b.WriteString(": ")
		b.WriteString(e.Path)
	case FromEnv:
		b.WriteString(e.Path)
		if e.Origin.Value != "" {
			fmt.Fprintf(&b, " (env %s=%q)", e.Origin.Name, e.Origin.Value)
		} else {
			fmt.Fprintf(&b, " (env %s)", e.Origin.Name)
		}
	case FromFlag, FromDefault:
		b.WriteString(e.Path)
		if e.Origin.Name != "" {
			fmt.Fprintf(&b, " (%s)", e.Origin.Name)
		}
	default:
		b.WriteString(e.Path)
	}
	if e.Path == "" && e.Origin.Kind != FromFile {
		return strings.TrimPrefix(b.String(), " ") + e.Detail
	}
	b.WriteString(": ")
	b.WriteString(e.Detail)
	return b.String()
}

// ErrorList is every problem found in one configuration, in the order
// found. Its Error has one line per problem.
type ErrorList []*FieldError

// Error joins the problems, one per line.
func (l ErrorList) Error() string {
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Addf appends a problem with path.
func (l *ErrorList) Addf(path, format string, args ...any) {
	*l = append(*l, &FieldError{Path: path, Detail: fmt.Sprintf(format, args...)})
}

// Paths returns the path of each problem, for tests.
func (l ErrorList) Paths() []string {
	out := make([]string, len(l))
	for i, e := range l {
		out[i] = e.Path
	}
	return out
}

// AsErrorList returns the ErrorList in err's chain.
func AsErrorList(err error) (ErrorList, bool) {
	var l ErrorList
	ok := errors.As(err, &l)
	return l, ok
}

// IsInvalid reports whether err is (or wraps) a configuration error list.
func IsInvalid(err error) bool {
	_, ok := AsErrorList(err)
	return ok
}

// OriginKind says which layer set a value.
type OriginKind int

// The layers, lowest precedence first.
const (
	FromDefault OriginKind = iota
	FromFile
	FromEnv
	FromFlag
)

// Origin is where a value came from: the file and line, the environment
// variable (and its value, unless the field is secret), or the flag.
type Origin struct {
	Kind  OriginKind
	Name  string // file name, variable name or "--flag"
	Line  int    // FromFile only; 0 when unknown
	Value string // FromEnv only, never for secrets
}
