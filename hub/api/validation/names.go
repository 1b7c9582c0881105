package validation

import (
	"fmt"
	"regexp"
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

var (
	dns1123Label     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	labelName        = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	acceleratorClass = regexp.MustCompile(`^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$`)
)

// checkDNSLabel returns a plain-words problem with s as a DNS-1123 label,
// or "" when it is valid.
func checkDNSLabel(s string) string {
	if len(s) > MaxNameLength {
		return fmt.Sprintf("must be at most %d characters (got %d)", MaxNameLength, len(s))
	}
	if !dns1123Label.MatchString(s) {
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
		if prefix == "" || len(prefix) > maxLabelPrefixLength || !dns1123Subdomain.MatchString(prefix) {
			return fmt.Sprintf("key %q: prefix must be a DNS-1123 subdomain of at most %d characters", k, maxLabelPrefixLength)
		}
	}
	if name == "" || len(name) > MaxNameLength || !labelName.MatchString(name) {
		return fmt.Sprintf("key %q: name part must be 1 to %d characters of letters, digits, '-', '_' or '.', starting and ending with a letter or digit", k, MaxNameLength)
	}
	return ""
}

// checkLabelValue returns a problem with a Kubernetes label value, or "".
func checkLabelValue(v string) string {
	if len(v) > MaxLabelValueLength {
		return fmt.Sprintf("value must be at most %d characters (got %d)", MaxLabelValueLength, len(v))
	}
	if v != "" && !labelName.MatchString(v) {
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
	if !acceleratorClass.MatchString(s) {
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
