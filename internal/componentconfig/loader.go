package componentconfig

import (
	"fmt"
	"os"
	"reflect"
	"strings"

	"github.com/spf13/pflag"
)

// ConfigFlag is the flag that names the configuration file.
const ConfigFlag = "config"

// Loader loads one configuration from the layers, in this order, each
// overriding the one before:
//
//  1. the defaults (Schema.Defaults);
//  2. the file named by --config, if any;
//  3. the environment variables of each Field (an empty one is unset);
//  4. the flags given on the command line.
//
// A value given by a layer replaces the whole value below it: a list or a
// map from a flag is not merged with the file's. A repeatable flag (a map
// such as --label k=v) builds its value from all its occurrences.
type Loader[T any] struct {
	schema *Schema[T]
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
	// ReadFile reads the configuration file; nil means os.ReadFile.
	ReadFile func(string) ([]byte, error)

	configFile string
	flags      []*flagValue
}

// NewLoader returns a loader for s. It panics when a Field with a flag or
// variable names no field of T (a programming error CheckFields reports).
func NewLoader[T any](s *Schema[T]) *Loader[T] {
	l := &Loader[T]{schema: s}
	def := s.Defaults()
	for i := range s.Fields {
		f := &s.Fields[i]
		if f.Flag == "" {
			continue
		}
		v, err := fieldValue(reflect.ValueOf(def).Elem(), f.Path)
		if err != nil {
			panic(err)
		}
		l.flags = append(l.flags, &flagValue{field: f, typ: v.Type(), def: formatValue(v)})
	}
	return l
}

// AddFlags registers --config and one flag per Field that has one. The
// usage of each names its variables and its path in the file.
func (l *Loader[T]) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&l.configFile, ConfigFlag, "", fmt.Sprintf("YAML file holding a %s (%s); the environment and flags override it", l.schema.Kind, l.schema.APIVersion))
	for _, fv := range l.flags {
		fv.raw = nil
		usage := fv.field.Usage
		var where []string
		if len(fv.field.Env) > 0 {
			where = append(where, "env "+strings.Join(fv.field.Env, ", then "))
		}
		where = append(where, "file "+fv.field.Path)
		usage += " (" + strings.Join(where, "; ") + ")"
		fl := fs.VarPF(fv, fv.field.Flag, "", usage)
		if fv.typ.Kind() == reflect.Bool {
			fl.NoOptDefVal = "true"
		}
	}
}

// ConfigFile returns the --config value.
func (l *Loader[T]) ConfigFile() string { return l.configFile }

// Load builds the configuration from the layers and validates it. On any
// problem it returns an ErrorList with every problem found: decoding
// errors of the file, the environment and the flags, then validation
// errors, each naming the path and where the bad value came from. A file
// that cannot be read is a plain error.
func (l *Loader[T]) Load() (*T, error) {
	cfg := l.schema.Defaults()
	origins := map[string]Origin{}
	var errs ErrorList
	if l.configFile != "" {
		read := l.ReadFile
		if read == nil {
			read = os.ReadFile
		}
		data, err := read(l.configFile)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", ConfigFlag, err)
		}
		errs = append(errs, l.schema.Decode(l.configFile, data, cfg, origins)...)
	}
	getenv := l.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	root := reflect.ValueOf(cfg).Elem()
	for i := range l.schema.Fields {
		f := &l.schema.Fields[i]
		for _, name := range f.Env {
			val := getenv(name)
			if val == "" {
				continue
			}
			o := Origin{Kind: FromEnv, Name: name}
			if !f.Secret {
				o.Value = val
			}
			v, err := fieldValue(root, f.Path)
			if err != nil {
				panic(err)
			}
			if err := setFromStrings(v, []string{val}, true); err != nil {
				// The value below stays, and so does its origin.
				errs = append(errs, &FieldError{Path: f.Path, Detail: err.Error(), Origin: o})
			} else {
				origins[f.Path] = o
			}
			break
		}
	}
	for _, fv := range l.flags {
		if fv.raw == nil {
			continue
		}
		v, err := fieldValue(root, fv.field.Path)
		if err != nil {
			panic(err)
		}
		o := Origin{Kind: FromFlag, Name: "--" + fv.field.Flag}
		if err := setFromStrings(v, fv.raw, false); err != nil { // checked by Set already
			errs = append(errs, &FieldError{Path: fv.field.Path, Detail: err.Error(), Origin: o})
		}
		origins[fv.field.Path] = o
	}
	if l.schema.Complete != nil {
		l.schema.Complete(cfg)
	}
	for _, e := range l.schema.Validate(cfg) {
		e.Origin = l.origin(origins, e.Path)
		errs = append(errs, e)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return cfg, nil
}

// origin finds where the value at path, or the nearest enclosing value,
// came from; for a default it names the field's flag, if any, as a hint.
func (l *Loader[T]) origin(origins map[string]Origin, path string) Origin {
	for p := path; p != ""; p = parent(p) {
		if o, ok := origins[p]; ok {
			return o
		}
	}
	if f := l.schema.field(path); f != nil && f.Flag != "" {
		return Origin{Kind: FromDefault, Name: "--" + f.Flag}
	}
	return Origin{}
}

// parent strips the last ".name" or "[i]" of path.
func parent(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// flagValue is the pflag.Value of one Field: it checks the syntax when the
// flag is parsed and keeps the text until Load applies it over the file
// and the environment.
type flagValue struct {
	field *Field
	typ   reflect.Type
	def   string
	raw   []string // nil: not given
}

func (f *flagValue) String() string {
	if f.raw != nil {
		return strings.Join(f.raw, ",")
	}
	return f.def
}

func (f *flagValue) Set(s string) error {
	if err := setFromStrings(reflect.New(f.typ).Elem(), []string{s}, false); err != nil {
		return err
	}
	if f.typ.Kind() == reflect.Map {
		f.raw = append(f.raw, s)
	} else {
		f.raw = []string{s}
	}
	return nil
}

func (f *flagValue) Type() string {
	if f.typ == durationType {
		return "duration"
	}
	switch f.typ.Kind() {
	case reflect.Map:
		return "key=value"
	case reflect.Slice:
		return "list"
	case reflect.Float64:
		return "float"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "int"
	}
	return f.typ.Kind().String()
}

// Parse loads data alone over the defaults (no environment, no flags),
// completes and validates it: what `config validate` does for a file
// that needs nothing else. name is the file name used in errors.
func (s *Schema[T]) Parse(name string, data []byte) (*T, error) {
	l := NewLoader(s)
	l.configFile = name
	l.ReadFile = func(string) ([]byte, error) { return data, nil }
	l.Getenv = func(string) string { return "" }
	return l.Load()
}
