package store

import (
	"fmt"
	"strings"
)

// Root is the prefix of every Meridian key.
const Root = "/meridian"

// Kind is the first path segment below Root.
type Kind string

// The kinds of record the hub stores.
const (
	KindWorkloads   Kind = "workloads"
	KindQueues      Kind = "queues"
	KindClusters    Kind = "clusters"
	KindDispatches  Kind = "dispatches"
	KindIdempotency Kind = "idempotency"
	KindLedger      Kind = "ledger"
	// KindCancelRequests holds a user's request to cancel a workload, by
	// workload id, until the leader's loop acts on it: only the loop
	// writes a workload after its creation
	// (docs/design/single-writer-workloads.md).
	KindCancelRequests Kind = "cancel-requests"
)

// Kinds lists every known kind, in a fixed order.
func Kinds() []Kind {
	return []Kind{KindWorkloads, KindQueues, KindClusters, KindDispatches, KindIdempotency, KindLedger, KindCancelRequests}
}

// Valid reports whether k is one of the known kinds.
func (k Kind) Valid() bool {
	for _, known := range Kinds() {
		if k == known {
			return true
		}
	}
	return false
}

// MaxIDLen bounds an id's length in bytes.
const MaxIDLen = 512

// ValidateID returns an error naming the problem when id cannot be used as
// the <id> part of a key.
func ValidateID(id string) error {
	if id == "" {
		return fmt.Errorf("store: id is empty")
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("store: id is %d bytes, more than %d", len(id), MaxIDLen)
	}
	if strings.HasPrefix(id, "/") || strings.HasSuffix(id, "/") || strings.Contains(id, "//") {
		return fmt.Errorf("store: id %q has an empty path segment", id)
	}
	for i, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("._-:@=+~/", r):
		default:
			return fmt.Errorf("store: id %q has invalid character %q at byte %d", id, r, i)
		}
	}
	for seg := range strings.SplitSeq(id, "/") { // no slice: every key a write names passes here
		if seg == "." || seg == ".." {
			return fmt.Errorf("store: id %q has a %q segment", id, seg)
		}
	}
	return nil
}

// Key returns /meridian/<kind>/<id>, or an error naming the bad part.
func Key(kind Kind, id string) (string, error) {
	if !kind.Valid() {
		return "", fmt.Errorf("store: unknown kind %q", kind)
	}
	if err := ValidateID(id); err != nil {
		return "", fmt.Errorf("store: %s key: %w", kind, err)
	}
	return Root + "/" + string(kind) + "/" + id, nil
}

// Prefix returns /meridian/<kind>/, the prefix that lists every key of kind.
// It returns "" for an unknown kind.
func Prefix(kind Kind) string {
	if !kind.Valid() {
		return ""
	}
	return Root + "/" + string(kind) + "/"
}

// ParseKey splits a key made by Key back into its kind and id.
func ParseKey(key string) (Kind, string, error) {
	rest, ok := strings.CutPrefix(key, Root+"/")
	if !ok {
		return "", "", fmt.Errorf("store: key %q is not under %s/", key, Root)
	}
	k, id, ok := strings.Cut(rest, "/")
	if !ok || !Kind(k).Valid() {
		return "", "", fmt.Errorf("store: key %q has no known kind", key)
	}
	if err := ValidateID(id); err != nil {
		return "", "", fmt.Errorf("store: key %q: %w", key, err)
	}
	return Kind(k), id, nil
}
