package componentconfig

import (
	"encoding"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Field documents one setting and says which flag and environment
// variables also set it. Every leaf of a configuration type has exactly
// one Field (Schema.CheckFields tells which do not).
type Field struct {
	// Path is the YAML path: "api.grpcAddr". A field of a list element
	// is written with "[]": "auth.oidc.issuers[].issuerURL"; such fields
	// are file-only (no Flag, no Env).
	Path string
	// Flag is the long flag name without dashes; empty: no flag.
	Flag string
	// Env are the environment variables that set the field, the first
	// non-empty one winning; an empty variable counts as unset.
	Env []string
	// Usage is one sentence or two for --help, the JSON Schema and docs.
	Usage string
	// Enum lists the allowed values of a string field, for the JSON
	// Schema; Validate still checks them.
	Enum []string
	// Secret fields are read from the environment only (a file that sets
	// one is refused) and printed as <redacted>.
	Secret bool
}

// Schema describes one versioned configuration type T.
type Schema[T any] struct {
	// APIVersion and Kind are what a file must declare, and what the
	// defaults carry.
	APIVersion, Kind string
	// Fields documents every leaf of T.
	Fields []Field
	// Defaults returns a fresh configuration holding every default.
	Defaults func() *T
	// Complete, when not nil, fills the defaults that depend on what was
	// loaded (such as those of list elements). Loader.Load calls it after
	// the last layer, before Validate.
	Complete func(*T)
	// Validate checks a loaded configuration and returns every problem.
	// It must be pure: no file reads, no network.
	Validate func(*T) ErrorList
}

// Redacted replaces a secret's value when a configuration is printed.
const Redacted = "<redacted>"

var (
	durationType        = reflect.TypeFor[Duration]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// yamlName is the YAML key of a struct field; "" when it has none.
func yamlName(sf reflect.StructField) string {
	if !sf.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	return name
}

// isLeaf reports whether values of t are set whole (scalars, lists of
// scalars, maps) rather than walked key by key (structs, lists of structs).
func isLeaf(t reflect.Type) bool {
	if t == durationType || reflect.PointerTo(t).Implements(textUnmarshalerType) {
		return true
	}
	switch t.Kind() {
	case reflect.Struct:
		return false
	case reflect.Slice:
		return isLeaf(t.Elem())
	}
	return true
}

// leafPaths lists the paths of every leaf of t, lists of structs as "[]".
func leafPaths(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		sf := t.Field(i)
		name := yamlName(sf)
		if name == "" {
			continue
		}
		p := join(prefix, name)
		switch {
		case isLeaf(sf.Type):
			out = append(out, p)
		case sf.Type.Kind() == reflect.Slice:
			out = append(out, leafPaths(sf.Type.Elem(), p+"[]")...)
		default:
			out = append(out, leafPaths(sf.Type, p)...)
		}
	}
	return out
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// fieldValue returns the addressable value at a dotted path of plain
// struct fields (no list elements) in v, a struct value.
func fieldValue(v reflect.Value, path string) (reflect.Value, error) {
	for seg := range strings.SplitSeq(path, ".") {
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, fmt.Errorf("componentconfig: path %q: %q is inside a %s", path, seg, v.Kind())
		}
		found := false
		for i := range v.NumField() {
			if yamlName(v.Type().Field(i)) == seg {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return reflect.Value{}, fmt.Errorf("componentconfig: path %q: no field %q", path, seg)
		}
	}
	return v, nil
}

// CheckFields reports leaves of T without a Field, Fields naming no leaf,
// fields listed twice, flags or variables used twice, and flags or
// variables on list elements. A test of each configuration package calls
// it.
func (s *Schema[T]) CheckFields() error {
	var problems []string
	leaves := map[string]bool{}
	for _, p := range leafPaths(reflect.TypeFor[T](), "") {
		leaves[p] = true
	}
	seen, flags, envs := map[string]bool{}, map[string]string{}, map[string]string{}
	for _, f := range s.Fields {
		if seen[f.Path] {
			problems = append(problems, f.Path+": listed twice")
		}
		seen[f.Path] = true
		if !leaves[f.Path] {
			problems = append(problems, f.Path+": no such leaf in the type")
		}
		if strings.Contains(f.Path, "[]") && (f.Flag != "" || len(f.Env) > 0) {
			problems = append(problems, f.Path+": a field of a list element cannot have a flag or a variable")
		}
		if f.Flag != "" {
			if other, ok := flags[f.Flag]; ok {
				problems = append(problems, fmt.Sprintf("%s: flag --%s is also %s's", f.Path, f.Flag, other))
			}
			flags[f.Flag] = f.Path
		}
		for _, e := range f.Env {
			if other, ok := envs[e]; ok {
				problems = append(problems, fmt.Sprintf("%s: variable %s is also %s's", f.Path, e, other))
			}
			envs[e] = f.Path
		}
		if f.Usage == "" {
			problems = append(problems, f.Path+": no usage")
		}
		if f.Secret && f.Flag != "" {
			problems = append(problems, f.Path+": a secret must not have a flag (ps shows flags)")
		}
	}
	for p := range leaves {
		if !seen[p] {
			problems = append(problems, p+": no Field documents it")
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("componentconfig: %s", strings.Join(problems, "; "))
	}
	return nil
}

// field returns the Field of a concrete path ("auth.oidc.issuers[2].caFile"
// is "auth.oidc.issuers[].caFile").
func (s *Schema[T]) field(path string) *Field {
	abstract := abstractPath(path)
	for i := range s.Fields {
		if s.Fields[i].Path == abstract {
			return &s.Fields[i]
		}
	}
	return nil
}

// abstractPath replaces list indices "[3]" by "[]".
func abstractPath(path string) string {
	var b strings.Builder
	for i := 0; i < len(path); i++ {
		if path[i] == '[' {
			j := strings.IndexByte(path[i:], ']')
			if j > 0 {
				if _, err := strconv.Atoi(path[i+1 : i+j]); err == nil {
					b.WriteString("[]")
					i += j
					continue
				}
			}
		}
		b.WriteByte(path[i])
	}
	return b.String()
}

// setFromStrings sets v from command-line or environment text. A list
// takes comma-separated items; a map takes key=value pairs, one per item
// of vals, and with split also comma-separated within an item. Errors
// say what was wanted, without the field's name.
func setFromStrings(v reflect.Value, vals []string, split bool) error {
	last := ""
	if len(vals) > 0 {
		last = vals[len(vals)-1]
	}
	if v.Type() == durationType {
		var d Duration
		if err := d.UnmarshalText([]byte(last)); err != nil {
			return err
		}
		v.Set(reflect.ValueOf(d))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(last)
	case reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(last))
		if err != nil {
			return fmt.Errorf("want true or false (or 1 or 0), got %q", last)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64, reflect.Int32:
		n, err := strconv.ParseInt(strings.TrimSpace(last), 10, 64)
		if err != nil || v.OverflowInt(n) {
			return fmt.Errorf("want an integer, got %q", last)
		}
		v.SetInt(n)
	case reflect.Float64:
		f, err := strconv.ParseFloat(strings.TrimSpace(last), 64)
		if err != nil {
			return fmt.Errorf("want a number, got %q", last)
		}
		v.SetFloat(f)
	case reflect.Slice:
		if v.Type().Elem().Kind() != reflect.String {
			return fmt.Errorf("componentconfig: cannot set a %s from text", v.Type())
		}
		out := reflect.MakeSlice(v.Type(), 0, 0)
		for _, s := range vals {
			for item := range strings.SplitSeq(s, ",") {
				if item = strings.TrimSpace(item); item != "" {
					out = reflect.Append(out, reflect.ValueOf(item).Convert(v.Type().Elem()))
				}
			}
		}
		v.Set(out)
	case reflect.Map:
		out := reflect.MakeMap(v.Type())
		for _, s := range vals {
			items := []string{s}
			if split {
				items = strings.Split(s, ",")
			}
			for _, item := range items {
				if split && strings.TrimSpace(item) == "" {
					continue
				}
				k, val, ok := strings.Cut(item, "=")
				k, val = strings.TrimSpace(k), strings.TrimSpace(val)
				if !ok || k == "" {
					return fmt.Errorf("want key=value, got %q", item)
				}
				ev := reflect.New(v.Type().Elem()).Elem()
				if err := setFromStrings(ev, []string{val}, false); err != nil {
					return fmt.Errorf("%s: %w", k, err)
				}
				out.SetMapIndex(reflect.ValueOf(k), ev)
			}
		}
		v.Set(out)
	default:
		return fmt.Errorf("componentconfig: cannot set a %s from text", v.Type())
	}
	return nil
}

// formatValue writes v the way a flag or variable would give it.
func formatValue(v reflect.Value) string {
	if v.Type() == durationType {
		return v.Interface().(Duration).String()
	}
	switch v.Kind() {
	case reflect.Slice:
		parts := make([]string, v.Len())
		for i := range v.Len() {
			parts[i] = fmt.Sprint(v.Index(i).Interface())
		}
		return strings.Join(parts, ",")
	case reflect.Map:
		keys := v.MapKeys()
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%v=%v", k.Interface(), v.MapIndex(k).Interface()))
		}
		slices.Sort(parts)
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v.Interface())
}
