package validation

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	yamlv3 "go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// MaxDocumentBytes is the largest document DecodeWorkload accepts.
const MaxDocumentBytes = 1 << 20

// DecodeError is returned by DecodeWorkload. Field and Line are filled in
// when the problem can be traced to a place in the document.
type DecodeError struct {
	// Field is the path of the offending field as written in the document,
	// for example `podSets[1].resources.gpuMilli`; empty if unknown.
	Field string
	// Line is the 1-based line in the document; 0 if unknown.
	Line int
	// Err is the underlying problem.
	Err error
}

func (e *DecodeError) Error() string {
	var b strings.Builder
	b.WriteString("decode workload: ")
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, "field %s: ", e.Field)
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *DecodeError) Unwrap() error { return e.Err }

// IsDecodeError reports whether err is (or wraps) a *DecodeError.
func IsDecodeError(err error) bool {
	var de *DecodeError
	return errors.As(err, &de)
}

// protojsonPos matches the position protojson puts in its messages.
var protojsonPos = regexp.MustCompile(`\(line (\d+):(\d+)\): `)

// yamlLine matches the line yaml parsers put in their messages.
var yamlLine = regexp.MustCompile(`line (\d+)`)

// DecodeWorkload parses a Workload from a YAML or JSON document of at most
// MaxDocumentBytes. Field names may be written as in the .proto file
// (`pod_sets`) or in lowerCamelCase (`podSets`); enums by name
// (`TOPOLOGY_RACK`). Unknown fields and duplicate keys are errors. It does
// not validate the result: call ValidateWorkload on it.
//
// Every error is a *DecodeError; it names the field and line when it can.
func DecodeWorkload(data []byte) (*meridianv1.Workload, error) {
	if len(data) > MaxDocumentBytes {
		return nil, &DecodeError{Err: fmt.Errorf("document is %d bytes; the limit is %d (1 MiB)", len(data), MaxDocumentBytes)}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &DecodeError{Err: errors.New("document is empty")}
	}
	if !utf8.Valid(data) {
		return nil, &DecodeError{Err: errors.New("document is not valid UTF-8")}
	}
	// JSON goes to protojson as is, so its strings are not reinterpreted
	// by YAML 1.1 (which, for one, folds U+0085 into a space) and error
	// positions are exact. Anything else is YAML, converted to JSON first;
	// strict, so duplicate keys fail.
	js := data
	isJSON := json.Valid(data)
	if !isJSON {
		var err error
		js, err = yaml.YAMLToJSONStrict(data)
		if err != nil {
			de := &DecodeError{Err: fmt.Errorf("not valid YAML or JSON: %w", err)}
			if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
				de.Line, _ = strconv.Atoi(m[1])
			}
			return nil, de
		}
	}
	trimmed := bytes.TrimSpace(js)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, &DecodeError{Line: 1, Err: errors.New("document must be a mapping (an object) of workload fields")}
	}
	w := &meridianv1.Workload{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(js, w); err != nil {
		return nil, locate(data, js, isJSON, err)
	}
	return w, nil
}

// locate turns a protojson error on the JSON js (the document itself when
// isJSON, else its conversion from YAML) into a
// DecodeError naming the field path and, via the original document, the
// line.
func locate(doc, js []byte, isJSON bool, err error) *DecodeError {
	msg := err.Error()
	de := &DecodeError{Err: err}
	m := protojsonPos.FindStringSubmatchIndex(msg)
	if m == nil {
		return de
	}
	line, _ := strconv.Atoi(msg[m[2]:m[3]])
	col, _ := strconv.Atoi(msg[m[4]:m[5]])
	// Drop protojson's own position (it refers to the converted JSON).
	de.Err = errors.New(strings.TrimPrefix(msg[:m[0]]+msg[m[1]:], "proto: "))
	off := offsetOf(js, line, col)
	if off < 0 {
		if isJSON {
			de.Line = line
		}
		return de
	}
	path := jsonPathAt(js, off)
	if len(path) == 0 {
		if isJSON {
			de.Line = line
		}
		return de
	}
	de.Field = formatPath(path)
	if isJSON {
		de.Line = line
	} else {
		de.Line = yamlLineOf(doc, path)
	}
	if strings.Contains(msg, "string field") && (strings.HasSuffix(msg, ": true") || strings.HasSuffix(msg, ": false")) {
		de.Err = fmt.Errorf("%w (YAML reads unquoted y, yes, no, on, off, true and false as booleans: quote the value)", de.Err)
	}
	return de
}

// offsetOf converts protojson's 1-based line and rune column into a byte
// offset in b, or -1.
func offsetOf(b []byte, line, col int) int {
	off := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(b[off:], '\n')
		if i < 0 {
			return -1
		}
		off += i + 1
	}
	for c := 1; c < col; c++ {
		if off >= len(b) {
			return -1
		}
		_, n := utf8.DecodeRune(b[off:])
		off += n
	}
	return off
}

// pathElem is one step of a path: an object key or an array index.
type pathElem struct {
	key   string
	index int
	isIdx bool
}

// jsonPathAt returns the path of the key or value whose token spans byte
// offset off in the JSON document js.
func jsonPathAt(js []byte, off int) []pathElem {
	type frame struct {
		arr       bool
		idx       int
		key       string
		expectKey bool
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var stack []frame
	current := func() []pathElem {
		out := make([]pathElem, 0, len(stack))
		for _, f := range stack {
			if f.arr {
				out = append(out, pathElem{index: f.idx, isIdx: true})
			} else if f.key != "" || !f.expectKey {
				out = append(out, pathElem{key: f.key})
			}
		}
		return out
	}
	// valueDone marks the end of one value in the enclosing frame.
	valueDone := func() {
		if n := len(stack); n > 0 {
			if stack[n-1].arr {
				stack[n-1].idx++
			} else {
				stack[n-1].expectKey = true
			}
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return current()
		}
		end := int(dec.InputOffset())
		top := len(stack) - 1
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if end > off {
					return current()
				}
				stack = append(stack, frame{arr: t == '[', expectKey: t == '{'})
			case '}', ']':
				if end > off {
					stack[top].key = ""
					stack[top].expectKey = true
					return current()
				}
				stack = stack[:top]
				valueDone()
			}
		default:
			if top >= 0 && !stack[top].arr && stack[top].expectKey {
				s, _ := t.(string)
				stack[top].key = s
				stack[top].expectKey = false
				if end > off {
					return current()
				}
				continue
			}
			if end > off {
				return current()
			}
			valueDone()
		}
	}
}

// formatPath writes a path as `a.b[2].c`.
func formatPath(path []pathElem) string {
	var b strings.Builder
	for i, p := range path {
		if p.isIdx {
			fmt.Fprintf(&b, "[%d]", p.index)
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p.key)
	}
	return b.String()
}

// yamlLineOf finds the line of path in the original document, or 0.
func yamlLineOf(doc []byte, path []pathElem) int {
	var root yamlv3.Node
	if err := yamlv3.Unmarshal(doc, &root); err != nil {
		return 0
	}
	n := &root
	line := 0
	for depth := 0; n != nil && depth < 1000; depth++ {
		for n.Kind == yamlv3.DocumentNode || n.Kind == yamlv3.AliasNode {
			if n.Kind == yamlv3.DocumentNode {
				if len(n.Content) == 0 {
					return line
				}
				n = n.Content[0]
			} else {
				if n.Alias == nil {
					return line
				}
				n = n.Alias
			}
		}
		if n.Line > 0 {
			line = n.Line
		}
		if len(path) == 0 {
			return line
		}
		p := path[0]
		path = path[1:]
		var next *yamlv3.Node
		switch {
		case p.isIdx && n.Kind == yamlv3.SequenceNode && p.index < len(n.Content):
			next = n.Content[p.index]
		case !p.isIdx && n.Kind == yamlv3.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == p.key {
					line = n.Content[i].Line
					next = n.Content[i+1]
					if len(path) == 0 {
						return line
					}
					break
				}
			}
		}
		n = next
	}
	return line
}
