package slurm

import (
	"bytes"
	"reflect"
	"strings"
)

// A job listing is large: Slurm 22.05 writes about 3.7 KB of JSON per job,
// with over a hundred fields, and finished jobs stay listed for MinJobAge.
// The connector reads about fifteen of those fields, on every poll and
// every inventory. Decoding the whole document with encoding/json cost
// about 29 µs per job (two passes over every byte, one to validate and one
// to decode), the largest part of the connector's CPU under a burst.
//
// reduceJobs makes one validating pass instead: it copies the document with
// only the keys a decoder reads (see keepJobKey) and returns nil when the
// input is not of the usual shape (then the caller decodes the original,
// which also gives encoding/json's error for bad input). Decoding the
// reduced copy gives the same result as decoding the original: it is valid
// JSON exactly when the original is, every kept value is copied byte for
// byte, and dropped keys are ones encoding/json would ignore.

// keySet is a set of lower-case ASCII keys, grouped by length: a key of a
// length no member has is refused without hashing it (most of a job's
// keys), others are compared with the few members of their length.
type keySet [65][]string

func newKeySet(names ...string) *keySet {
	var k keySet
	for _, n := range names {
		k[len(n)] = append(k[len(n)], strings.ToLower(n))
	}
	return &k
}

// jobFields are the JSON keys of v0038Job.
var jobFields = func() *keySet {
	var names []string
	t := reflect.TypeFor[v0038Job]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
	}
	return newKeySet(names...)
}()

// topFields are the top-level keys DecodeJobs reads besides "jobs".
var topFields = newKeySet("meta", "errors")

// mayMatch reports whether encoding/json could match key (raw, without
// quotes) to a member of set. encoding/json matches case-insensitively,
// with Unicode folding (the Kelvin sign is a "k"); a key with an escape or
// a non-ASCII byte is therefore always kept, and only a plain ASCII key is
// compared, in lower case.
func mayMatch(key []byte, set *keySet) bool {
	for _, c := range key {
		if c == '\\' || c >= 0x80 {
			return true
		}
	}
	if len(key) >= len(set) || len(set[len(key)]) == 0 {
		return false
	}
	var buf [64]byte
	for i, c := range key {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	for _, n := range set[len(key)] {
		if string(buf[:len(key)]) == n {
			return true
		}
	}
	return false
}

// reduceJobs returns a copy of a jobs response holding only meta, errors
// and, for every job, the keys of v0038Job; nil when data is not valid
// JSON or not an object whose "jobs" is an array of objects (or null).
func reduceJobs(data []byte) []byte {
	s := jsonScan{b: data}
	out := make([]byte, 0, len(data)/6+64)
	s.ws()
	if !s.eat('{') {
		return nil
	}
	out = append(out, '{')
	first := true
	s.ws()
	if !s.eat('}') {
		for {
			s.ws()
			k0 := s.i
			if !s.skipString() {
				return nil
			}
			key := data[k0+1 : s.i-1]
			s.ws()
			if !s.eat(':') {
				return nil
			}
			s.ws()
			v0 := s.i
			isJobs := len(key) == 4 && bytes.EqualFold(key, []byte("jobs"))
			if isJobs || mayMatch(key, topFields) {
				if !first {
					out = append(out, ',')
				}
				first = false
				out = append(out, data[k0:v0]...)
				if isJobs {
					var ok bool
					if out, ok = s.reduceJobArray(out); !ok {
						return nil
					}
				} else {
					if !s.skipValue(0) {
						return nil
					}
					out = append(out, data[v0:s.i]...)
				}
			} else if !s.skipValue(0) {
				return nil
			}
			s.ws()
			if s.eat('}') {
				break
			}
			if !s.eat(',') {
				return nil
			}
		}
	}
	s.ws()
	if s.i != len(data) {
		return nil
	}
	return append(out, '}')
}

// reduceJobArray copies the jobs array at s.i (or null), keeping in each job
// only the keys of v0038Job; false when it is neither.
func (s *jsonScan) reduceJobArray(out []byte) ([]byte, bool) {
	if s.literal("null") {
		return append(out, "null"...), true
	}
	if !s.eat('[') {
		return out, false
	}
	out = append(out, '[')
	s.ws()
	if s.eat(']') {
		return append(out, ']'), true
	}
	for n := 0; ; n++ {
		s.ws()
		if n > 0 {
			out = append(out, ',')
		}
		if !s.eat('{') {
			return out, false // a job that is not an object: let encoding/json say why
		}
		out = append(out, '{')
		s.ws()
		if !s.eat('}') {
			kept := 0
			for {
				s.ws()
				k0 := s.i
				if !s.skipString() {
					return out, false
				}
				key := s.b[k0+1 : s.i-1]
				s.ws()
				if !s.eat(':') {
					return out, false
				}
				s.ws()
				v0 := s.i
				if !s.skipValue(1) {
					return out, false
				}
				if mayMatch(key, jobFields) {
					if kept > 0 {
						out = append(out, ',')
					}
					kept++
					out = append(out, s.b[k0:v0]...)
					out = append(out, s.b[v0:s.i]...)
				}
				s.ws()
				if s.eat('}') {
					break
				}
				if !s.eat(',') {
					return out, false
				}
			}
		}
		out = append(out, '}')
		s.ws()
		if s.eat(']') {
			return append(out, ']'), true
		}
		if !s.eat(',') {
			return out, false
		}
	}
}

// jsonScan is a validating JSON scanner over b (RFC 8259, as strict as
// encoding/json's Valid, except that it accepts invalid UTF-8 inside
// strings, as encoding/json's Unmarshal does).
type jsonScan struct {
	b []byte
	i int
}

// maxDepth bounds nesting; deeper input (never seen from Slurm) is left to
// encoding/json, whose own limit (10000) then applies to the original.
const maxDepth = 1000

func (s *jsonScan) ws() {
	b, i := s.b, s.i
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	s.i = i
}

func (s *jsonScan) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *jsonScan) literal(lit string) bool {
	if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
		s.i += len(lit)
		return true
	}
	return false
}

// skipValue moves past one value, checking it; depth is the nesting so far.
func (s *jsonScan) skipValue(depth int) bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		return s.skipString()
	case c == '{' || c == '[':
		if depth >= maxDepth {
			return false
		}
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		s.i++
		s.ws()
		if s.eat(end) {
			return true
		}
		for {
			s.ws()
			if c == '{' {
				if !s.skipString() {
					return false
				}
				s.ws()
				if !s.eat(':') {
					return false
				}
				s.ws()
			}
			if !s.skipValue(depth + 1) {
				return false
			}
			s.ws()
			if s.eat(end) {
				return true
			}
			if !s.eat(',') {
				return false
			}
		}
	case c == '-' || ('0' <= c && c <= '9'):
		return s.skipNumber()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return false
}

// skipString moves past a string, checking its escapes and that it holds
// no control characters.
func (s *jsonScan) skipString() bool {
	if !s.eat('"') {
		return false
	}
	b := s.b
	for i := s.i; i < len(b); {
		c := b[i]
		switch {
		case c == '"':
			s.i = i + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if i+1 >= len(b) {
				return false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return false
				}
				for _, h := range b[i+2 : i+6] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return false
					}
				}
				i += 6
			default:
				return false
			}
		default:
			i++
		}
	}
	return false
}

// skipNumber moves past -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *jsonScan) skipNumber() bool {
	b, i := s.b, s.i
	digits := func() bool {
		j := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		return i > j
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		digits()
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	s.i = i
	return true
}
