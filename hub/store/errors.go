package store

import (
	"errors"
	"fmt"
	"strings"

	"github.com/meridian-gpu/meridian/hub/leader"
)

// ErrConflict is matched (errors.Is) by every *ConflictError.
var ErrConflict = errors.New("conflict")

// ErrNotLeader is leader.ErrNotLeader: the commit's fence no longer holds.
var ErrNotLeader = leader.ErrNotLeader

// ErrNotFound means Get found no key.
var ErrNotFound = errors.New("not found")

// ErrTooManyOps means a commit had more operations than one transaction may
// carry. Nothing was written; the caller must shrink the plan, never split it
// silently.
var ErrTooManyOps = errors.New("too many operations in one transaction")

// KeyConflict is one failed mod-revision check.
type KeyConflict struct {
	Key string
	// Want is the mod revision the op required (0: must not exist).
	Want int64
	// Have is the key's mod revision at commit time (0: it did not exist).
	Have int64
}

// ConflictError lists every key whose mod-revision check failed.
type ConflictError struct {
	Keys []KeyConflict
}

func (e *ConflictError) Error() string {
	parts := make([]string, 0, len(e.Keys))
	for _, k := range e.Keys {
		switch {
		case k.Want == 0:
			parts = append(parts, fmt.Sprintf("%s (want absent, have mod rev %d)", k.Key, k.Have))
		case k.Have == 0:
			parts = append(parts, fmt.Sprintf("%s (want mod rev %d, key is absent)", k.Key, k.Want))
		default:
			parts = append(parts, fmt.Sprintf("%s (want mod rev %d, have %d)", k.Key, k.Want, k.Have))
		}
	}
	return "store: conflict on " + strings.Join(parts, ", ")
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// IsConflict reports whether err is or wraps a conflict.
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }

// IsNotLeader reports whether err is or wraps ErrNotLeader.
func IsNotLeader(err error) bool { return errors.Is(err, ErrNotLeader) }

// IsNotFound reports whether err is or wraps ErrNotFound.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsTooManyOps reports whether err is or wraps ErrTooManyOps.
func IsTooManyOps(err error) bool { return errors.Is(err, ErrTooManyOps) }
