package dashboards

import (
	"fmt"
	"sort"
	"strings"
)

// promqlKeywords are the words of PromQL that are neither metric names
// nor functions: operators, aggregation modifiers and literals.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true, "offset": true, "bool": true, "inf": true, "nan": true, "atan2": true,
}

// aggregations may be followed by by/without before their "(".
var aggregations = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true, "count": true,
	"count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true,
}

// labelListWords take a parenthesised list of label names after them.
var labelListWords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// MetricNames returns the metric names an expression selects, sorted and
// without repeats. It is a small lexer, not a full parser: it skips
// strings, label matchers ({...}), ranges ([...]), numbers, durations,
// Grafana variables ($name, ${name}), function and aggregation names (a
// word before "("), keywords and the label lists of by/without/on/
// ignoring/group_left/group_right. It fails on unbalanced brackets or an
// unterminated string, naming the offset.
func MetricNames(expr string) ([]string, error) {
	seen := map[string]bool{}
	depth := map[byte]int{}
	i := 0
	for i < len(expr) {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j, err := skipString(expr, i)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '{' || c == '[':
			closer := byte('}')
			if c == '[' {
				closer = ']'
			}
			j, err := skipBracket(expr, i, c, closer)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '}' || c == ']':
			return nil, fmt.Errorf("promql %q: unbalanced %q at offset %d", expr, c, i)
		case c == '(':
			depth['(']++
			i++
		case c == ')':
			if depth['('] == 0 {
				return nil, fmt.Errorf("promql %q: unbalanced ')' at offset %d", expr, i)
			}
			depth['(']--
			i++
		case c == '$':
			i++
			if i < len(expr) && expr[i] == '{' {
				j := strings.IndexByte(expr[i:], '}')
				if j < 0 {
					return nil, fmt.Errorf("promql %q: unterminated ${ at offset %d", expr, i)
				}
				i += j + 1
				continue
			}
			for i < len(expr) && isWordByte(expr[i]) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isWordByte(expr[i]) || expr[i] == '.') {
				i++
			}
		case isWordStart(c):
			j := i
			for j < len(expr) && (isWordByte(expr[j]) || expr[j] == ':') {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\t' || expr[k] == '\n' || expr[k] == '\r') {
				k++
			}
			lower := strings.ToLower(word)
			switch {
			case labelListWords[lower]:
				if k < len(expr) && expr[k] == '(' {
					end := strings.IndexByte(expr[k:], ')')
					if end < 0 {
						return nil, fmt.Errorf("promql %q: unterminated label list after %s at offset %d", expr, word, k)
					}
					j = k + end + 1
				}
			case promqlKeywords[lower]:
			case aggregations[lower] && k < len(expr) && (expr[k] == '(' || isWordStart(expr[k])):
			case k < len(expr) && expr[k] == '(':
				// a function or an aggregation
			default:
				seen[word] = true
			}
			i = j
		default:
			i++
		}
	}
	if depth['('] != 0 {
		return nil, fmt.Errorf("promql %q: %d unclosed '('", expr, depth['('])
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

func isWordStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isWordByte(c byte) bool { return isWordStart(c) || c >= '0' && c <= '9' }

func skipString(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		if s[j] == '\\' && q != '`' {
			j++
			continue
		}
		if s[j] == q {
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("promql %q: unterminated string at offset %d", s, i)
}

func skipBracket(s string, i int, open, closer byte) (int, error) {
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '"', '\'', '`':
			k, err := skipString(s, j)
			if err != nil {
				return 0, err
			}
			j = k - 1
		case closer:
			return j + 1, nil
		case open:
			return 0, fmt.Errorf("promql %q: nested %q at offset %d", s, open, j)
		}
	}
	return 0, fmt.Errorf("promql %q: unclosed %q at offset %d", s, open, i)
}

// BaseName is the metric family a series name belongs to: a histogram's
// _bucket, _sum and _count series belong to the histogram. ok is false
// for a name with none of those suffixes.
func BaseName(series string) (base string, ok bool) {
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if strings.HasSuffix(series, suf) {
			return strings.TrimSuffix(series, suf), true
		}
	}
	return series, false
}
