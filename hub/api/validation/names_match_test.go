package validation

import (
	"regexp"
	"testing"
)

// The rules as regular expressions, which the hand-written matchers must
// agree with on every input.
var nameRules = []struct {
	name  string
	re    *regexp.Regexp
	match func(string) bool
}{
	{"DNS-1123 label", regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`), isDNSLabel},
	{"DNS-1123 subdomain", regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`), isDNSSubdomain},
	{"label name", regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`), isLabelName},
	{"accelerator class", regexp.MustCompile(`^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$`), isAcceleratorClass},
}

var nameSamples = []string{
	"", "a", "A", "0", "-", ".", "_", "a-", "-a", "a-b", "a--b", "a.b", "a..b", ".a", "a.", "a_b", "_a", "a_",
	"Ab", "aB", "a/b", "a b", "ä", "aä", "nvidia-h100-80gb", "example.com", "sub.example.com", "x.-y", "x-.y",
	"k8s.io", "A.B", "a\x00", "a\nb", "abc-DEF_ghi.jkl",
}

func TestNameMatchersAgreeWithTheRules(t *testing.T) {
	for _, r := range nameRules {
		for _, s := range nameSamples {
			if got, want := r.match(s), r.re.MatchString(s); got != want {
				t.Errorf("%s %q: matcher says %v, the rule %v", r.name, s, got, want)
			}
		}
	}
}

func FuzzNameMatchersAgreeWithTheRules(f *testing.F) {
	for _, s := range nameSamples {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, r := range nameRules {
			if got, want := r.match(s), r.re.MatchString(s); got != want {
				t.Fatalf("%s %q: matcher says %v, the rule %v", r.name, s, got, want)
			}
		}
	})
}
