package componentconfig

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// durationPattern matches what time.ParseDuration accepts.
const durationPattern = `^[-+]?(0|([0-9]*(\.[0-9]*)?(ns|us|µs|ms|s|m|h))+)$`

// JSONSchema returns a JSON Schema (draft 2020-12) of T built from its Go
// type and the Field table: every object closed to unknown keys, each
// property with its description (usage, flag, variables) and default.
// Editors with a YAML language server use it to complete and check files.
func (s *Schema[T]) JSONSchema(id string) ([]byte, error) {
	def := reflect.ValueOf(s.Defaults()).Elem()
	root := s.typeSchema(def.Type(), def, "")
	root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	if id != "" {
		root["$id"] = id
	}
	root["title"] = s.Kind
	root["description"] = fmt.Sprintf("%s %s: defaults, then this file, then environment variables, then flags.", s.APIVersion, s.Kind)
	root["required"] = []string{"apiVersion", "kind"}
	b, err := json.MarshalIndent(root, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func (s *Schema[T]) typeSchema(t reflect.Type, def reflect.Value, path string) map[string]any {
	out := map[string]any{}
	switch {
	case t == durationType:
		out["anyOf"] = []any{
			map[string]any{"type": "string", "pattern": durationPattern},
			map[string]any{"const": 0},
		}
	case t.Kind() == reflect.Struct:
		out["type"] = "object"
		out["additionalProperties"] = false
		props := map[string]any{}
		for i := range t.NumField() {
			sf := t.Field(i)
			name := yamlName(sf)
			if name == "" {
				continue
			}
			var fv reflect.Value
			if def.IsValid() {
				fv = def.Field(i)
			}
			props[name] = s.typeSchema(sf.Type, fv, join(path, name))
		}
		out["properties"] = props
	case t.Kind() == reflect.Slice:
		out["type"] = "array"
		var ev reflect.Value
		out["items"] = s.typeSchema(t.Elem(), ev, path+"[]")
	case t.Kind() == reflect.Map:
		out["type"] = "object"
		out["additionalProperties"] = s.typeSchema(t.Elem(), reflect.Value{}, path+".*")
	case t.Kind() == reflect.String:
		out["type"] = "string"
	case t.Kind() == reflect.Bool:
		out["type"] = "boolean"
	case t.Kind() == reflect.Int, t.Kind() == reflect.Int64, t.Kind() == reflect.Int32:
		out["type"] = "integer"
	case t.Kind() == reflect.Float64:
		out["type"] = "number"
	}
	if f := s.field(path); f != nil {
		desc := f.Usage
		var how []string
		if f.Flag != "" {
			how = append(how, "flag --"+f.Flag)
		}
		if len(f.Env) > 0 {
			how = append(how, "env "+strings.Join(f.Env, ", then "))
		}
		if len(how) > 0 {
			desc += " (" + strings.Join(how, "; ") + ")"
		}
		if f.Secret {
			desc += " Secret: read from the environment only, never from this file."
		}
		out["description"] = desc
		if len(f.Enum) > 0 {
			out["enum"] = f.Enum
		}
		if def.IsValid() && !f.Secret {
			if d, ok := jsonDefault(def); ok {
				out["default"] = d
			}
		}
	}
	if (path == "apiVersion" || path == "kind") && def.IsValid() {
		out["const"] = formatValue(def)
		delete(out, "default")
	}
	return out
}

// jsonDefault is the default as JSON would hold it.
func jsonDefault(v reflect.Value) (any, bool) {
	if v.Type() == durationType {
		return v.Interface().(Duration).String(), true
	}
	switch v.Kind() {
	case reflect.Slice:
		if v.Len() == 0 {
			return []any{}, true
		}
	case reflect.Map:
		if v.Len() == 0 {
			return map[string]any{}, true
		}
	}
	return v.Interface(), true
}
