package quota

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
)

// Unlimited is the BorrowLimit or LendLimit value that means "no limit".
const Unlimited int64 = -1

// AnyClass is the Limits key that applies to every accelerator class the
// queue does not list explicitly.
const AnyClass = "*"

// MaxMilli bounds every quota figure and every single charge (about 1.1
// billion GPUs), so that sums over a whole tree cannot overflow int64.
const MaxMilli int64 = 1 << 40

// MaxQueues bounds the number of queues in one tree (implicit parents
// included).
const MaxQueues = 1 << 20

// MaxDepth is the deepest a queue path may be: tenant / team / project.
const MaxDepth = 3

// Limits is one queue's quota for one accelerator class, in milli-GPUs
// (1000 = one GPU).
//
// In Go, set BorrowLimit and LendLimit to Unlimited (-1) explicitly when you
// mean "no limit": the zero value means "may not borrow" and "lends
// nothing". In JSON (and YAML through sigs.k8s.io/yaml) an omitted or null
// borrowLimit / lendLimit means Unlimited, as an omitted limit does in
// Kueue.
type Limits struct {
	// Nominal is the quota guaranteed to the queue's subtree.
	Nominal int64 `json:"nominal"`
	// BorrowLimit is how far above Nominal the subtree may go by borrowing
	// idle quota from elsewhere; Unlimited for no limit.
	BorrowLimit int64 `json:"borrowLimit"`
	// LendLimit is how much of the subtree's idle Nominal queues outside
	// the subtree may borrow; Unlimited for all of it. Nominal - LendLimit
	// is reserved for the subtree even when it is idle.
	LendLimit int64 `json:"lendLimit"`
}

// UnmarshalJSON decodes Limits; an omitted or null borrowLimit or lendLimit
// means Unlimited.
func (l *Limits) UnmarshalJSON(data []byte) error {
	if l == nil {
		return errors.New("quota: UnmarshalJSON on nil *Limits")
	}
	var raw struct {
		Nominal     *int64 `json:"nominal"`
		BorrowLimit *int64 `json:"borrowLimit"`
		LendLimit   *int64 `json:"lendLimit"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	*l = Limits{BorrowLimit: Unlimited, LendLimit: Unlimited}
	if raw.Nominal != nil {
		l.Nominal = *raw.Nominal
	}
	if raw.BorrowLimit != nil {
		l.BorrowLimit = *raw.BorrowLimit
	}
	if raw.LendLimit != nil {
		l.LendLimit = *raw.LendLimit
	}
	return nil
}

// QueueSpec configures one queue of the tree.
type QueueSpec struct {
	// Path is "tenant", "tenant/team" or "tenant/team/project".
	Path string `json:"path"`
	// Weight is the queue's fairshare share among its siblings; 0 means
	// the default, 1.
	Weight float64 `json:"weight,omitempty"`
	// Limits maps an accelerator class, or AnyClass, to the queue's quota
	// for it.
	Limits map[string]Limits `json:"limits,omitempty"`
}

// ErrInvalidSpec is wrapped by every validation error NewTree returns.
var ErrInvalidSpec = errors.New("invalid queue spec")

// FieldError is a validation error for one field of the input.
type FieldError struct {
	// Field names the offending field, e.g. `queues[3].limits["nvidia-h100"].nominal`.
	Field string
	// Reason says what is wrong and what is allowed.
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalidSpec) true.
func (e *FieldError) Unwrap() error { return ErrInvalidSpec }

// IsInvalidSpec reports whether err is (or wraps) a spec validation error.
func IsInvalidSpec(err error) bool { return errors.Is(err, ErrInvalidSpec) }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ValidatePath checks a queue path: 1 to 3 segments separated by "/", each
// matching [a-z0-9]([-a-z0-9]*[a-z0-9])? and at most 63 characters long.
func ValidatePath(path string) error {
	if path == "" {
		return errors.New("must not be empty")
	}
	segs := strings.Split(path, "/")
	if len(segs) > MaxDepth {
		return fmt.Errorf("%q has %d segments, at most %d (tenant/team/project) are allowed", path, len(segs), MaxDepth)
	}
	for i, s := range segs {
		if err := validateSegment(s); err != nil {
			return fmt.Errorf("%q: segment %d %w", path, i+1, err)
		}
	}
	return nil
}

func validateSegment(s string) error {
	if s == "" {
		return errors.New("is empty (no leading, trailing or doubled '/')")
	}
	if len(s) > 63 {
		return fmt.Errorf("is %d characters long, at most 63 are allowed", len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0 && i < len(s)-1
		if !ok {
			return fmt.Errorf("%q must match [a-z0-9]([-a-z0-9]*[a-z0-9])?", s)
		}
	}
	return nil
}

// ValidateClass checks an accelerator class name: 1 to 63 characters of
// letters, digits, '-', '_' and '.', starting and ending with a letter or
// digit; or AnyClass when allowed.
func ValidateClass(class string) error {
	if class == "" {
		return errors.New("must not be empty")
	}
	if len(class) > 63 {
		return fmt.Errorf("is %d characters long, at most 63 are allowed", len(class))
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	for i := 0; i < len(class); i++ {
		c := class[i]
		inner := c == '-' || c == '_' || c == '.'
		if !(alnum(c) || inner && i > 0 && i < len(class)-1) {
			return fmt.Errorf("%q must be letters, digits, '-', '_' or '.', starting and ending with a letter or digit", class)
		}
	}
	return nil
}

func validateLimits(field string, l Limits) error {
	switch {
	case l.Nominal < 0:
		return fieldErr(field+".nominal", "must be >= 0, got %d", l.Nominal)
	case l.Nominal > MaxMilli:
		return fieldErr(field+".nominal", "must be <= %d milli-GPUs, got %d", MaxMilli, l.Nominal)
	case l.BorrowLimit < Unlimited:
		return fieldErr(field+".borrowLimit", "must be >= 0, or -1 for unlimited, got %d", l.BorrowLimit)
	case l.BorrowLimit > MaxMilli:
		return fieldErr(field+".borrowLimit", "must be <= %d milli-GPUs, or -1 for unlimited, got %d", MaxMilli, l.BorrowLimit)
	case l.LendLimit < Unlimited:
		return fieldErr(field+".lendLimit", "must be >= 0, or -1 for unlimited, got %d", l.LendLimit)
	case l.LendLimit > MaxMilli:
		return fieldErr(field+".lendLimit", "must be <= %d milli-GPUs, or -1 for unlimited, got %d", MaxMilli, l.LendLimit)
	}
	return nil
}

// validateSpecs checks every spec and returns the first error, in input
// order, naming the field.
func validateSpecs(specs []QueueSpec) error {
	if len(specs) > MaxQueues {
		return fieldErr("queues", "has %d entries, at most %d are allowed", len(specs), MaxQueues)
	}
	seen := make(map[string]int, len(specs))
	for i, s := range specs {
		f := fmt.Sprintf("queues[%d]", i)
		if err := ValidatePath(s.Path); err != nil {
			return fieldErr(f+".path", "%v", err)
		}
		if j, dup := seen[s.Path]; dup {
			return fieldErr(f+".path", "%q duplicates queues[%d].path", s.Path, j)
		}
		seen[s.Path] = i
		if math.IsNaN(s.Weight) || math.IsInf(s.Weight, 0) || s.Weight < 0 {
			return fieldErr(f+".weight", "must be a finite number > 0 (0 means the default, 1), got %v", s.Weight)
		}
		for _, class := range sortedKeys(s.Limits) {
			lf := fmt.Sprintf("%s.limits[%q]", f, class)
			if class != AnyClass {
				if err := ValidateClass(class); err != nil {
					return fieldErr(lf, "class name %v", err)
				}
			}
			if err := validateLimits(lf, s.Limits[class]); err != nil {
				return err
			}
		}
	}
	return nil
}

// ParseSpecsJSON decodes a JSON array of QueueSpec, rejecting unknown
// fields, and validates it like NewTree does.
func ParseSpecsJSON(data []byte) ([]QueueSpec, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var specs []QueueSpec
	if err := dec.Decode(&specs); err != nil {
		return nil, fmt.Errorf("queues: %w", err)
	}
	if len(bytes.TrimSpace(data[dec.InputOffset():])) != 0 {
		return nil, errors.New("queues: unexpected data after the JSON array")
	}
	if err := validateSpecs(specs); err != nil {
		return nil, err
	}
	return specs, nil
}
