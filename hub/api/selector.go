package api

import (
	"fmt"
	"strings"
)

// requirement is one term of an equality-based label selector.
type requirement struct {
	key   string
	value string
	neq   bool
}

// selector is a parsed Kubernetes-style equality selector such as
// `team=vision,tier!=batch`. The empty selector matches everything.
type selector []requirement

// parseSelector parses s; the error says what is wrong in plain words.
func parseSelector(s string) (selector, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if len(s) > 4096 {
		return nil, fmt.Errorf("is %d characters; at most 4096", len(s))
	}
	var sel selector
	for i, term := range strings.Split(s, ",") {
		term = strings.TrimSpace(term)
		var r requirement
		var k, v string
		switch {
		case strings.Contains(term, "!="):
			k, v, _ = strings.Cut(term, "!=")
			r.neq = true
		case strings.Contains(term, "=="):
			k, v, _ = strings.Cut(term, "==")
		case strings.Contains(term, "="):
			k, v, _ = strings.Cut(term, "=")
		default:
			return nil, fmt.Errorf("term %d %q: want key=value, key==value or key!=value", i+1, term)
		}
		r.key, r.value = strings.TrimSpace(k), strings.TrimSpace(v)
		if r.key == "" {
			return nil, fmt.Errorf("term %d %q has an empty key", i+1, term)
		}
		if strings.ContainsAny(r.value, "=!") {
			return nil, fmt.Errorf("term %d %q: the value must not contain '=' or '!'", i+1, term)
		}
		sel = append(sel, r)
	}
	return sel, nil
}

// matches reports whether labels satisfy every requirement. A missing key
// fails `=` and satisfies `!=`.
func (sel selector) matches(labels map[string]string) bool {
	for _, r := range sel {
		v, ok := labels[r.key]
		if r.neq {
			if ok && v == r.value {
				return false
			}
		} else if !ok || v != r.value {
			return false
		}
	}
	return true
}

// queueMatches reports whether queue is filter or lies below it. The empty
// filter matches every queue.
func queueMatches(filter, queue string) bool {
	return filter == "" || queue == filter || strings.HasPrefix(queue, filter+"/")
}
