package authz

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
)

// Config is the authorization section of the hub's configuration file:
// which global permissions each group and each user holds. It is validated
// once, with errors that name the field path.
//
//	authorization:
//	  groupPermissions:
//	    platform-admins: [admin]
//	    ml-admins: [queues.create, workloads.view_all]
//	  userPermissions:
//	    ci-bot: [workloads.submit_any]
type Config struct {
	// GroupPermissions maps a group name (as the identity provider sends
	// it, matched exactly) to the permissions its members hold.
	GroupPermissions map[string][]string `json:"groupPermissions,omitempty" yaml:"groupPermissions,omitempty"`
	// UserPermissions maps a user name to the permissions that user holds.
	UserPermissions map[string][]string `json:"userPermissions,omitempty" yaml:"userPermissions,omitempty"`
}

// ConfigFieldPrefix is the path of Config in the hub's configuration file;
// Validate's errors start with it.
const ConfigFieldPrefix = "authorization"

// ErrInvalid is wrapped by every validation error of this package.
var ErrInvalid = errors.New("invalid authorization settings")

// IsInvalid reports whether err is (or wraps) a validation error of this
// package.
func IsInvalid(err error) bool { return errors.Is(err, ErrInvalid) }

// FieldError is one problem with one field.
type FieldError struct {
	// Field is the path, for example
	// `authorization.groupPermissions["ml-admins"][2]`.
	Field string
	// Reason says what is wrong and what is allowed.
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// fieldErrors collects FieldErrors and joins them in field order.
type fieldErrors []*FieldError

func (fe *fieldErrors) add(field, format string, args ...any) {
	*fe = append(*fe, &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
}

func (fe fieldErrors) err() error {
	if len(fe) == 0 {
		return nil
	}
	sort.SliceStable(fe, func(i, j int) bool { return fe[i].Field < fe[j].Field })
	errs := make([]error, len(fe))
	for i, e := range fe {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// Validate checks every group and user name and every permission. The
// returned error joins one *FieldError per problem, sorted by field path,
// for example:
//
//	authorization.groupPermissions["ml-admins"][2]: unknown permission "queue.create"; did you mean "queues.create"?
func (c *Config) Validate() error {
	if c == nil {
		return nil
	}
	var fe fieldErrors
	validatePermMap(&fe, ConfigFieldPrefix+".groupPermissions", "group", c.GroupPermissions)
	validatePermMap(&fe, ConfigFieldPrefix+".userPermissions", "user", c.UserPermissions)
	return fe.err()
}

func validatePermMap(fe *fieldErrors, base, what string, m map[string][]string) {
	for _, name := range sortedKeys(m) {
		field := base + "[" + strconv.Quote(name) + "]"
		if err := validateName(name); err != nil {
			fe.add(field, "%s name %v", what, err)
		}
		seen := map[Permission]int{}
		for i, s := range m[name] {
			f := field + "[" + strconv.Itoa(i) + "]"
			p, err := ParsePermission(s)
			if err != nil {
				fe.add(f, "%v", err)
				continue
			}
			if j, dup := seen[p]; dup {
				fe.add(f, "duplicate permission %q (also at [%d])", p, j)
				continue
			}
			seen[p] = i
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// permsOf turns validated permission names into a set (unknown names are
// skipped; Validate reports them).
func permsOf(names []string) permSet {
	var s permSet
	for _, n := range names {
		if b, ok := permBit(Permission(n)); ok {
			s |= b
		}
	}
	return s
}
