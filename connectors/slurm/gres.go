package slurm

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Limits that keep a hostile or corrupt string from making the parsers
// allocate without bound.
const (
	maxIndex      = 4096  // highest GPU index accepted in an IDX list
	maxHostlist   = 65536 // most host names one hostlist may expand to
	maxHostNumber = 1 << 30
)

// Gres is one entry of a Slurm generic-resource string such as
// "gpu:h100:8(S:0-1)" or, in gres_used, "gpu:h100:2(IDX:0-1)".
type Gres struct {
	// Name is the GRES name: gpu, shard, mps, ...
	Name string
	// Type is the optional GRES type (h100); empty when absent.
	Type string
	// Count is the number of units (GPUs, shards, MPS percent units).
	Count int64
	// IDX are the device indices from an "(IDX:...)" suffix; nil when the
	// entry has none or it is "N/A".
	IDX []int
}

// ParseGres parses a comma-separated GRES list as Slurm prints it in node
// "gres", "gres_used" and job "gres_detail" fields. "(null)", "N/A" and ""
// give an empty list. Commas inside parentheses belong to the entry.
func ParseGres(s string) ([]Gres, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "(null)" || s == "N/A" {
		return nil, nil
	}
	var out []Gres
	depth, start := 0, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) {
			switch s[i] {
			case '(':
				depth++
				continue
			case ')':
				depth--
				if depth < 0 {
					return nil, fmt.Errorf("gres %q: unbalanced ')' at offset %d", s, i)
				}
				continue
			case ',':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		}
		if depth != 0 {
			return nil, fmt.Errorf("gres %q: unbalanced '('", s)
		}
		g, err := parseGresEntry(s[start:i])
		if err != nil {
			return nil, fmt.Errorf("gres %q: %w", s, err)
		}
		out = append(out, g)
		start = i + 1
	}
	return out, nil
}

// parseGresEntry parses "name[:type][:count][(suffix)]".
func parseGresEntry(e string) (Gres, error) {
	e = strings.TrimSpace(e)
	if e == "" {
		return Gres{}, fmt.Errorf("empty entry")
	}
	var g Gres
	suffix := ""
	if i := strings.IndexByte(e, '('); i >= 0 {
		if !strings.HasSuffix(e, ")") {
			return g, fmt.Errorf("entry %q: text after ')'", e)
		}
		suffix, e = e[i+1:len(e)-1], e[:i]
	}
	parts := strings.Split(e, ":")
	if len(parts) > 3 {
		return g, fmt.Errorf("entry %q: more than name:type:count", e)
	}
	g.Name = parts[0]
	if g.Name == "" {
		return g, fmt.Errorf("entry %q: empty name", e)
	}
	g.Count = 1
	rest := parts[1:]
	if len(rest) > 0 {
		last := rest[len(rest)-1]
		if n, ok := parseCount(last); ok {
			g.Count = n
			rest = rest[:len(rest)-1]
		} else if len(rest) == 2 {
			return g, fmt.Errorf("entry %q: count %q is not a number", e, last)
		}
	}
	if len(rest) == 1 {
		g.Type = rest[0]
	}
	for _, kv := range splitTop(suffix) {
		if v, ok := strings.CutPrefix(kv, "IDX:"); ok {
			idx, err := ParseIndexList(v)
			if err != nil {
				return g, fmt.Errorf("entry %q: %w", e, err)
			}
			g.IDX = idx
		}
		// Other suffixes (S:0-1 socket affinity, 0/4 shard splits) carry
		// nothing the connector needs.
	}
	return g, nil
}

// splitTop splits the contents of a GRES suffix into its "KEY:value" parts.
// Only "IDX:" matters; its value may itself contain commas, so everything
// after "IDX:" up to the next ",X:" key is one part.
func splitTop(s string) []string {
	if s == "" {
		return nil
	}
	i := strings.Index(s, "IDX:")
	if i < 0 {
		return []string{s}
	}
	v := s[i:]
	// Stop at a later key such as ",S:" (letters followed by ':').
	for j := 4; j < len(v); j++ {
		if v[j] == ',' {
			k := j + 1
			for k < len(v) && (v[k] >= 'A' && v[k] <= 'Z') {
				k++
			}
			if k > j+1 && k < len(v) && v[k] == ':' {
				v = v[:j]
				break
			}
		}
	}
	return []string{v}
}

// parseCount parses a GRES count, which may carry a K/M/G suffix.
func parseCount(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	mult := int64(1)
	switch s[len(s)-1] {
	case 'k', 'K':
		mult = 1 << 10
	case 'm', 'M':
		mult = 1 << 20
	case 'g', 'G':
		mult = 1 << 30
	}
	if mult > 1 {
		s = s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<40)/mult {
		return 0, false
	}
	return n * mult, true
}

// ParseIndexList parses a Slurm index list such as "0-3,5,7-8" into sorted,
// de-duplicated indices. "N/A" and "" give nil. Indices above 4096 are an
// error.
func ParseIndexList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "N/A" {
		return nil, nil
	}
	seen := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 || a > maxIndex {
			return nil, fmt.Errorf("index list %q: bad index %q", s, lo)
		}
		b := a
		if isRange {
			b, err = strconv.Atoi(hi)
			if err != nil || b < a || b > maxIndex {
				return nil, fmt.Errorf("index list %q: bad range %q", s, part)
			}
		}
		for i := a; i <= b; i++ {
			seen[i] = true
		}
	}
	out := make([]int, 0, len(seen))
	for i := range seen {
		out = append(out, i)
	}
	sort.Ints(out)
	return out, nil
}

// ExpandHostlist expands a Slurm hostlist such as "gpu[1-2,4],cpu07" into
// names, keeping zero padding ("n[01-03]" gives n01 n02 n03). "" and
// "(null)" give nil.
func ExpandHostlist(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "(null)" || s == "None assigned" {
		return nil, nil
	}
	var out []string
	depth, start := 0, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) {
			switch s[i] {
			case '[':
				depth++
				continue
			case ']':
				depth--
				if depth < 0 {
					return nil, fmt.Errorf("hostlist %q: unbalanced ']'", s)
				}
				continue
			case ',':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		}
		if depth != 0 {
			return nil, fmt.Errorf("hostlist %q: unbalanced '['", s)
		}
		names, err := expandHost(s[start:i], len(out))
		if err != nil {
			return nil, fmt.Errorf("hostlist %q: %w", s, err)
		}
		out = append(out, names...)
		start = i + 1
	}
	return out, nil
}

// expandHost expands one "prefix[ranges]suffix" element (one bracket group).
func expandHost(h string, have int) ([]string, error) {
	if h == "" {
		return nil, fmt.Errorf("empty host name")
	}
	open := strings.IndexByte(h, '[')
	if open < 0 {
		return []string{h}, nil
	}
	closeAt := strings.IndexByte(h, ']')
	if closeAt < open {
		return nil, fmt.Errorf("host %q: bad brackets", h)
	}
	prefix, body, suffix := h[:open], h[open+1:closeAt], h[closeAt+1:]
	if strings.ContainsAny(suffix, "[]") {
		return nil, fmt.Errorf("host %q: more than one bracket group is not supported", h)
	}
	var out []string
	for _, part := range strings.Split(body, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 || a > maxHostNumber {
			return nil, fmt.Errorf("host %q: bad number %q", h, lo)
		}
		b := a
		if isRange {
			b, err = strconv.Atoi(hi)
			if err != nil || b < a || b > maxHostNumber {
				return nil, fmt.Errorf("host %q: bad range %q", h, part)
			}
		}
		if have+len(out)+(b-a+1) > maxHostlist {
			return nil, fmt.Errorf("host %q: expands to more than %d names", h, maxHostlist)
		}
		width := len(lo)
		for n := a; n <= b; n++ {
			out = append(out, fmt.Sprintf("%s%0*d%s", prefix, width, n, suffix))
		}
	}
	return out, nil
}
