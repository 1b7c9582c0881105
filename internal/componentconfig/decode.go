package componentconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/meridian-gpu/meridian/internal/editdist"
)

// Decode reads one YAML document from data onto cfg, which should hold the
// defaults: keys the file leaves out keep their value. It is strict: an
// unknown key, a duplicate key, a value of the wrong type, a secret, or a
// missing or wrong apiVersion or kind is an error naming the path, and
// every such problem is reported. name is the file name used in errors.
// It records in origins (when not nil) the file line of each path set.
func (s *Schema[T]) Decode(name string, data []byte, cfg *T, origins map[string]Origin) ErrorList {
	d := &decoder{name: name, origins: origins, secret: map[string][]string{}}
	for _, f := range s.Fields {
		if f.Secret {
			d.secret[f.Path] = f.Env
		}
	}
	if origins == nil {
		d.origins = map[string]Origin{}
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		d.addf(0, "", "not valid YAML: %v", strings.TrimPrefix(err.Error(), "yaml: "))
		return d.errs
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		d.addf(extra.Line, "", "holds more than one YAML document; want one %s", s.Kind)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == 0 || (root.Kind == yaml.ScalarNode && root.Tag == "!!null") {
		d.addf(0, "apiVersion", "required: the file is empty; want apiVersion: %s and kind: %s", s.APIVersion, s.Kind)
		return d.errs
	}
	d.decodeStruct(root, reflect.ValueOf(cfg).Elem(), "")
	if root.Kind == yaml.MappingNode {
		s.checkTypeMeta(d, root)
	}
	return d.errs
}

// checkTypeMeta requires apiVersion and kind to name this schema.
func (s *Schema[T]) checkTypeMeta(d *decoder, root *yaml.Node) {
	for _, want := range []struct{ key, value string }{{"apiVersion", s.APIVersion}, {"kind", s.Kind}} {
		var got *yaml.Node
		for i := 0; i+1 < len(root.Content); i += 2 {
			if root.Content[i].Value == want.key {
				got = root.Content[i+1]
			}
		}
		switch {
		case got == nil:
			d.addf(root.Line, want.key, "required: want %s: %s", want.key, want.value)
		case got.Value != want.value:
			d.addf(got.Line, want.key, "want %q, got %q", want.value, got.Value)
		}
	}
}

type decoder struct {
	name    string
	origins map[string]Origin
	secret  map[string][]string // path -> its variables
	errs    ErrorList
}

func (d *decoder) addf(line int, path, format string, args ...any) {
	d.errs = append(d.errs, &FieldError{Path: path, Detail: fmt.Sprintf(format, args...),
		Origin: Origin{Kind: FromFile, Name: d.name, Line: line}})
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// decodeStruct decodes a mapping node onto the struct v, key by key.
func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		d.addf(n.Line, path, "want a mapping of keys to values, got %s", describe(n))
		return
	}
	t := v.Type()
	byName := map[string]int{}
	var names []string
	for i := range t.NumField() {
		if name := yamlName(t.Field(i)); name != "" {
			byName[name] = i
			names = append(names, name)
		}
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		key := k.Value
		p := join(path, key)
		if line, dup := seen[key]; dup {
			d.addf(k.Line, p, "duplicate key (first on line %d)", line)
			continue
		}
		seen[key] = k.Line
		fi, ok := byName[key]
		if !ok {
			msg := fmt.Sprintf("unknown field %q", key)
			if sug := suggest(key, names); sug != "" {
				msg += fmt.Sprintf("; did you mean %q?", sug)
			}
			d.addf(k.Line, p, "%s", msg)
			continue
		}
		if env, secret := d.secret[abstractPath(p)]; secret {
			if !isNull(val) && (val.Kind != yaml.ScalarNode || val.Value != "") {
				d.addf(k.Line, p, "a secret is not read from a configuration file; set it in the environment (%s)", strings.Join(env, " or "))
			}
			continue
		}
		d.origins[p] = Origin{Kind: FromFile, Name: d.name, Line: k.Line}
		if isNull(val) {
			continue // "key:" with no value keeps the default
		}
		d.decodeValue(val, v.Field(fi), p)
	}
}

func (d *decoder) decodeValue(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	t := v.Type()
	switch {
	case isLeaf(t):
		tmp := reflect.New(t)
		if err := n.Decode(tmp.Interface()); err != nil {
			d.addf(n.Line, path, "want %s, got %s", want(t), describe(n))
			return
		}
		v.Set(tmp.Elem())
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.addf(n.Line, path, "want a list, got %s", describe(n))
			return
		}
		out := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, item := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			d.origins[p] = Origin{Kind: FromFile, Name: d.name, Line: item.Line}
			d.decodeStruct(item, out.Index(i), p)
		}
		v.Set(out)
	default:
		d.decodeStruct(n, v, path)
	}
}

// want says what a value of t looks like.
func want(t reflect.Type) string {
	if t == durationType {
		return "a duration such as 30s, 5m or 168h"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			return "a list of strings"
		}
		return "a list"
	case reflect.Map:
		return "a mapping of names to " + want(t.Elem())
	}
	return t.String()
}

// describe names a node's value for an error message.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "nothing"
}

// suggest returns the name closest to key when it is close enough to be a
// likely typo (or differs only in case).
func suggest(key string, names []string) string {
	best, bestD := "", 1<<30
	for _, n := range names {
		if strings.EqualFold(n, key) {
			return n
		}
		if dist := editdist.Distance(strings.ToLower(key), strings.ToLower(n)); dist < bestD {
			best, bestD = n, dist
		}
	}
	if bestD <= max(2, len(key)/3) {
		return best
	}
	// A known name that starts the key, or that the key starts ("tlsCrt"
	// for "tls", "cert" for "certFile").
	lk := strings.ToLower(key)
	for _, n := range names {
		ln := strings.ToLower(n)
		if len(lk) >= 3 && len(ln) >= 3 && (strings.HasPrefix(lk, ln) || strings.HasPrefix(ln, lk)) {
			return n
		}
	}
	return ""
}
