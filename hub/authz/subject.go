package authz

import (
	"fmt"
	"strings"
)

// Subject is who makes a request, as the authenticator established it.
// It is the input this package needs, not the authenticator's own type:
// the hub copies its principal into a Subject.
//
// A Subject with neither User nor TokenID is anonymous: it may only use
// the health service.
type Subject struct {
	// User is the authenticated user name (for an API token, the user the
	// token acts for). Matched by "user:NAME" access-list entries and by
	// Config.UserPermissions, unless the subject is a token.
	User string
	// Groups the user belongs to. Matched by "group:NAME" entries and by
	// Config.GroupPermissions, unless the subject is a token.
	Groups []string
	// TokenID is set when the request was authenticated by an API token.
	// Matched by "token:ID" access-list entries.
	TokenID string
	// TokenPermissions are the global permissions bound to the token when
	// it was minted. For a token they are the subject's only global
	// permissions: the configured group and user mappings do not apply, so
	// a token never holds more than it was minted with. Unknown names are
	// ignored (the token store validates them at mint time).
	TokenPermissions []Permission
}

// Anonymous reports whether the subject carries no identity at all.
func (s Subject) Anonymous() bool { return s.User == "" && s.TokenID == "" }

// IsToken reports whether the subject was authenticated by an API token.
func (s Subject) IsToken() bool { return s.TokenID != "" }

// String names the subject for logs and audit events: "user:alice" or
// "token:ID (user:alice)". It never contains a secret: a token id is not
// the token.
func (s Subject) String() string {
	switch {
	case s.TokenID != "" && s.User != "":
		return "token:" + s.TokenID + " (user:" + s.User + ")"
	case s.TokenID != "":
		return "token:" + s.TokenID
	case s.User != "":
		return "user:" + s.User
	}
	return "anonymous"
}

// SubjectKind is the kind of subject an access-list entry names.
type SubjectKind string

// The subject kinds of access-list entries.
const (
	KindUser  SubjectKind = "user"
	KindGroup SubjectKind = "group"
	KindToken SubjectKind = "token"
)

// SubjectRef is a parsed access-list subject such as "group:ml-admins".
type SubjectRef struct {
	Kind SubjectKind
	Name string
}

// String is the canonical "kind:name" form.
func (r SubjectRef) String() string { return string(r.Kind) + ":" + r.Name }

// MaxSubjectNameLen bounds a subject name in an access-list entry.
const MaxSubjectNameLen = 256

// ParseSubjectRef parses "user:NAME", "group:NAME" or "token:ID". Names are
// matched exactly (case-sensitive, as the identity provider sends them);
// they must be non-empty, at most MaxSubjectNameLen bytes, and free of
// spaces and control characters.
func ParseSubjectRef(s string) (SubjectRef, error) {
	kind, name, ok := strings.Cut(s, ":")
	if !ok {
		return SubjectRef{}, fmt.Errorf("subject %q must be user:NAME, group:NAME or token:ID", s)
	}
	var k SubjectKind
	switch kind {
	case "user":
		k = KindUser
	case "group":
		k = KindGroup
	case "token":
		k = KindToken
	default:
		return SubjectRef{}, fmt.Errorf("subject %q has unknown kind %q%s", s, kind, suggest(kind, []string{"user", "group", "token"}))
	}
	if err := validateName(name); err != nil {
		return SubjectRef{}, fmt.Errorf("subject %q: name %w", s, err)
	}
	return SubjectRef{Kind: k, Name: name}, nil
}

// validateName checks a user, group or token name.
func validateName(name string) error {
	if name == "" {
		return fmt.Errorf("must not be empty")
	}
	if len(name) > MaxSubjectNameLen {
		return fmt.Errorf("is %d bytes long, at most %d are allowed", len(name), MaxSubjectNameLen)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c == 0x7f {
			return fmt.Errorf("must not contain spaces or control characters")
		}
	}
	return nil
}
