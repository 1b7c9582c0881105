package validation

import (
	"fmt"
	"strings"
)

// Syntax limits shared by the rules.
const (
	// MaxNameLength is the longest DNS-1123 label (names, queue segments).
	MaxNameLength = 63
	// MaxLabelValueLength is the longest Kubernetes label value.
	MaxLabelValueLength = 63
	// maxLabelPrefixLength is the longest label key prefix (a DNS-1123
	// subdomain).
	maxLabelPrefixLength = 253
	// MaxQueueDepth is the number of segments in `tenant/team/project`.
	MaxQueueDepth = 3
)

// The name rules are matched by hand, not by regexp: every submit checks
// several names and every label, and the regexp engine was most of the
// validation's cost. TestNameMatchersAgreeWithTheRules holds each to the
// regular expression in its comment.

// Character classes, indexed by byte.
var (
	lowerDigit  = byteClass("abcdefghijklmnopqrstuvwxyz0123456789")
	lowerInner  = byteClass("abcdefghijklmnopqrstuvwxyz0123456789-")
	lowerInnerX = byteClass("abcdefghijklmnopqrstuvwxyz0123456789-_.")
	alnum       = byteClass("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
	alnumInner  = byteClass("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
)

func byteClass(chars string) (c [256]bool) {
	for i := range len(chars) {
		c[chars[i]] = true
	}
	return c
}

// edged reports whether s is not empty, starts and ends with a byte of
// edge, and has only bytes of inner in between.
func edged(s string, edge, inner *[256]bool) bool {
	n := len(s)
	if n == 0 || !edge[s[0]] || !edge[s[n-1]] {
		return false
	}
	for i := 1; i < n-1; i++ {
		if !inner[s[i]] {
			return false
		}
	}
	return true
}

// isDNSLabel: ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$
func isDNSLabel(s string) bool { return edged(s, &lowerDigit, &lowerInner) }

// isDNSSubdomain: ^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$
func isDNSSubdomain(s string) bool {
	for {
		i := strings.IndexByte(s, '.')
		if i < 0 {
			return isDNSLabel(s)
		}
		if !isDNSLabel(s[:i]) {
			return false
		}
		s = s[i+1:]
	}
}

// isLabelName: ^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$
func isLabelName(s string) bool { return edged(s, &alnum, &alnumInner) }

// isAcceleratorClass: ^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$
func isAcceleratorClass(s string) bool { return edged(s, &lowerDigit, &lowerInnerX) }

// checkDNSLabel returns a plain-words problem with s as a DNS-1123 label,
// or "" when it is valid.
func checkDNSLabel(s string) string {
	if len(s) > MaxNameLength {
		return fmt.Sprintf("must be at most %d characters (got %d)", MaxNameLength, len(s))
	}
	if !isDNSLabel(s) {
		return fmt.Sprintf("%q is not a DNS-1123 label: use lower-case letters, digits and '-', starting and ending with a letter or digit", s)
	}
	return ""
}

// CheckQueuePath returns nil when path is a valid queue path: 1 to 3
// segments separated by '/', each a DNS-1123 label of at most 63
// characters. Otherwise it returns an error in plain words.
func CheckQueuePath(path string) error {
	if path == "" {
		return fmt.Errorf("is required")
	}
	segs := strings.Split(path, "/")
	if len(segs) > MaxQueueDepth {
		return fmt.Errorf("%q has %d segments; a queue path has 1 to %d (tenant/team/project)", path, len(segs), MaxQueueDepth)
	}
	for i, seg := range segs {
		if seg == "" {
			return fmt.Errorf("%q has an empty segment %d; separate segments with a single '/', with none leading or trailing", path, i+1)
		}
		if p := checkDNSLabel(seg); p != "" {
			if len(segs) == 1 {
				return fmt.Errorf("%s", p)
			}
			return fmt.Errorf("segment %d of %q: %s", i+1, path, p)
		}
	}
	return nil
}

// checkLabelKey returns a problem with a Kubernetes label key
// (`[prefix/]name`), or "".
func checkLabelKey(k string) string {
	if k == "" {
		return "label key must not be empty"
	}
	name := k
	if i := strings.LastIndexByte(k, '/'); i >= 0 {
		prefix := k[:i]
		name = k[i+1:]
		if prefix == "" || len(prefix) > maxLabelPrefixLength || !isDNSSubdomain(prefix) {
			return fmt.Sprintf("key %q: prefix must be a DNS-1123 subdomain of at most %d characters", k, maxLabelPrefixLength)
		}
	}
	if name == "" || len(name) > MaxNameLength || !isLabelName(name) {
		return fmt.Sprintf("key %q: name part must be 1 to %d characters of letters, digits, '-', '_' or '.', starting and ending with a letter or digit", k, MaxNameLength)
	}
	return ""
}

// checkLabelValue returns a problem with a Kubernetes label value, or "".
func checkLabelValue(v string) string {
	if len(v) > MaxLabelValueLength {
		return fmt.Sprintf("value must be at most %d characters (got %d)", MaxLabelValueLength, len(v))
	}
	if v != "" && !isLabelName(v) {
		return fmt.Sprintf("value %q must be letters, digits, '-', '_' or '.', starting and ending with a letter or digit", v)
	}
	return ""
}

// checkAcceleratorClass returns a problem with an accelerator class name
// such as `nvidia-h100-80gb`, or "".
func checkAcceleratorClass(s string) string {
	if len(s) > MaxNameLength {
		return fmt.Sprintf("must be at most %d characters (got %d)", MaxNameLength, len(s))
	}
	if !isAcceleratorClass(s) {
		return fmt.Sprintf("%q is not a valid accelerator class: use lower-case letters, digits, '-', '_' or '.', like \"nvidia-h100-80gb\"", s)
	}
	return ""
}

// isPrintableASCII reports whether s has only characters 0x20..0x7e.
func isPrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
