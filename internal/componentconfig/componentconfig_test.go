package componentconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// testConfig exercises every kind of field the loader handles.
type testConfig struct {
	APIVersion string     `yaml:"apiVersion"`
	Kind       string     `yaml:"kind"`
	Name       string     `yaml:"name"`
	API        testAPI    `yaml:"api"`
	Items      []testItem `yaml:"items"`
}

type testAPI struct {
	Addr     string            `yaml:"addr"`
	TLSCert  string            `yaml:"tlsCert"`
	Period   Duration          `yaml:"period"`
	MaxBytes int               `yaml:"maxBytes"`
	Insecure bool              `yaml:"insecure"`
	Scale    float64           `yaml:"scale"`
	Peers    []string          `yaml:"peers"`
	Labels   map[string]string `yaml:"labels"`
	Memory   map[string]int64  `yaml:"memory"`
	Token    string            `yaml:"token"`
}

type testItem struct {
	URL      string `yaml:"url"`
	Audience string `yaml:"audience"`
}

func testSchema() *Schema[testConfig] {
	return &Schema[testConfig]{
		APIVersion: "test.io/v1", Kind: "TestConfiguration",
		Fields: []Field{
			{Path: "apiVersion", Usage: "version"},
			{Path: "kind", Usage: "kind"},
			{Path: "name", Flag: "name", Env: []string{"T_NAME", "T_NAME_FALLBACK"}, Usage: "name"},
			{Path: "api.addr", Flag: "addr", Env: []string{"T_ADDR"}, Usage: "address"},
			{Path: "api.tlsCert", Flag: "tls-cert", Usage: "certificate"},
			{Path: "api.period", Flag: "period", Env: []string{"T_PERIOD"}, Usage: "period"},
			{Path: "api.maxBytes", Flag: "max-bytes", Env: []string{"T_MAX_BYTES"}, Usage: "bytes"},
			{Path: "api.insecure", Flag: "insecure", Env: []string{"T_INSECURE"}, Usage: "insecure"},
			{Path: "api.scale", Flag: "scale", Usage: "scale"},
			{Path: "api.peers", Flag: "peers", Env: []string{"T_PEERS"}, Usage: "peers"},
			{Path: "api.labels", Flag: "label", Usage: "labels"},
			{Path: "api.memory", Flag: "memory", Usage: "memory"},
			{Path: "api.token", Env: []string{"T_TOKEN"}, Secret: true, Usage: "token"},
			{Path: "items[].url", Usage: "url"},
			{Path: "items[].audience", Usage: "audience"},
		},
		Defaults: func() *testConfig {
			return &testConfig{APIVersion: "test.io/v1", Kind: "TestConfiguration", Name: "default-name",
				API: testAPI{Addr: "127.0.0.1:1", Period: Duration(time.Second), MaxBytes: 4096, Scale: 1}}
		},
		Validate: func(c *testConfig) ErrorList {
			var errs ErrorList
			if c.API.Period <= 0 {
				errs.Addf("api.period", "must be positive (got %s)", c.API.Period)
			}
			if c.API.MaxBytes < 4096 {
				errs.Addf("api.maxBytes", "must be at least 4096 (got %d)", c.API.MaxBytes)
			}
			for i, it := range c.Items {
				if it.Audience == "" {
					errs.Addf("items["+string(rune('0'+i))+"].audience", "required")
				}
			}
			return errs
		},
	}
}

// load runs a Loader over a file, an environment and flags.
func load(t *testing.T, file string, env map[string]string, args ...string) (*testConfig, error) {
	t.Helper()
	l := NewLoader(testSchema())
	l.Getenv = func(k string) string { return env[k] }
	l.ReadFile = func(string) ([]byte, error) { return []byte(file), nil }
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	l.AddFlags(fs)
	if file != "" {
		args = append([]string{"--config", "config.yaml"}, args...)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return l.Load()
}

const header = "apiVersion: test.io/v1\nkind: TestConfiguration\n"

func TestPrecedenceFileEnvFlag(t *testing.T) {
	file := header + `name: from-file
api:
  addr: 10.0.0.1:1
  period: 3s
  maxBytes: 8192
  peers: [a, b]
  labels: {zone: file}
  insecure: true
`
	env := map[string]string{"T_ADDR": "10.0.0.2:2", "T_PERIOD": "4s", "T_PEERS": "c, d,,e", "T_NAME": "", "T_NAME_FALLBACK": "from-fallback-env"}
	c, err := load(t, file, env, "--period", "5s", "--label", "zone=flag", "--label", "rack=r1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what      string
		got, want any
	}{
		{"name: env fallback over file (the first variable is empty, so unset)", c.Name, "from-fallback-env"},
		{"addr: env over file", c.API.Addr, "10.0.0.2:2"},
		{"period: flag over env over file", c.API.Period, Duration(5 * time.Second)},
		{"maxBytes: file over default", c.API.MaxBytes, 8192},
		{"peers: env list replaces the file's", c.API.Peers, []string{"c", "d", "e"}},
		{"labels: repeated flag replaces the file's map", c.API.Labels, map[string]string{"zone": "flag", "rack": "r1"}},
		{"insecure: file", c.API.Insecure, true},
		{"scale: default", c.API.Scale, 1.0},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.what, tc.got, tc.want)
		}
	}
	// No file, no env: the defaults; a bool flag alone means true.
	c, err = load(t, "", nil, "--insecure")
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "default-name" || c.API.Period.D() != time.Second || !c.API.Insecure {
		t.Errorf("defaults: %+v", c)
	}
}

func TestUnknownKeyNamesPathAndSuggests(t *testing.T) {
	_, err := load(t, header+"api:\n  tlsCrt: x\n  bogus: 1\nnmae: y\n", nil)
	l, ok := AsErrorList(err)
	if !ok {
		t.Fatalf("err %v, want an ErrorList", err)
	}
	want := []string{
		`config.yaml:4: api.tlsCrt: unknown field "tlsCrt"; did you mean "tlsCert"?`,
		`config.yaml:5: api.bogus: unknown field "bogus"`,
		`config.yaml:6: nmae: unknown field "nmae"; did you mean "name"?`,
	}
	if len(l) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(l), len(want), err)
	}
	for i, w := range want {
		if l[i].Error() != w {
			t.Errorf("error %d = %q, want %q", i, l[i].Error(), w)
		}
	}
}

func TestAllProblemsReportedAtOnce(t *testing.T) {
	file := header + `api:
  period: soon
  maxBytes: 10
  peers: notalist
  insecure: perhaps
items:
  - url: a
  - url: b
    audience: x
  - url: c
    extra: 1
name: x
name: y
`
	_, err := load(t, file, map[string]string{"T_MAX_BYTES": "many"}, "--period", "0s")
	l, ok := AsErrorList(err)
	if !ok {
		t.Fatalf("err %v, want an ErrorList", err)
	}
	got := strings.Join(l.Paths(), " ")
	for _, p := range []string{"api.period", "api.maxBytes", "api.peers", "api.insecure", "items[0].audience", "items[2].extra", "items[2].audience", "name"} {
		if !slices.Contains(l.Paths(), p) {
			t.Errorf("no error for %s; got %s\n%v", p, got, err)
		}
	}
	msg := err.Error()
	for _, w := range []string{
		`config.yaml:4: api.period: want a duration such as 30s, 5m or 168h, got "soon"`,
		`api.maxBytes (env T_MAX_BYTES="many"): want an integer, got "many"`,
		`config.yaml:5: api.maxBytes: must be at least 4096 (got 10)`, // the file's value stayed
		`api.period (--period): must be positive (got 0s)`,
		`config.yaml:6: api.peers: want a list of strings, got "notalist"`,
		`config.yaml:15: name: duplicate key (first on line 14)`,
		`config.yaml:9: items[0].audience: required`,
	} {
		if !strings.Contains(msg, w) {
			t.Errorf("errors lack %q:\n%s", w, msg)
		}
	}
}

func TestTypeMetaRequired(t *testing.T) {
	for name, tc := range map[string]struct{ file, want string }{
		"missing":     {"name: x\n", "config.yaml:1: apiVersion: required: want apiVersion: test.io/v1"},
		"wrong kind":  {"apiVersion: test.io/v1\nkind: Other\n", `config.yaml:2: kind: want "TestConfiguration", got "Other"`},
		"empty file":  {"\n", "apiVersion: required: the file is empty"},
		"not a map":   {"- a\n", "want a mapping of keys to values"},
		"two docs":    {header + "---\n" + header, "more than one YAML document"},
		"not YAML":    {"a: [b\n", "not valid YAML"},
		"old version": {"apiVersion: test.io/v0\nkind: TestConfiguration\n", `apiVersion: want "test.io/v1", got "test.io/v0"`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := load(t, tc.file, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestSecretsComeFromTheEnvironmentOnlyAndArePrintedRedacted(t *testing.T) {
	_, err := load(t, header+"api:\n  token: s3cret\n", nil)
	if err == nil || !strings.Contains(err.Error(), "config.yaml:4: api.token: a secret is not read from a configuration file; set it in the environment (T_TOKEN)") {
		t.Fatalf("err %v, want the secret refused", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("the error shows the secret: %v", err)
	}
	c, err := load(t, header+"api:\n  token: \"\"\n", map[string]string{"T_TOKEN": "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	if c.API.Token != "s3cret" {
		t.Fatalf("token %q from the environment", c.API.Token)
	}
	out, err := testSchema().Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte("s3cret")) || !bytes.Contains(out, []byte("token: "+Redacted)) {
		t.Fatalf("printed configuration does not redact the token:\n%s", out)
	}
}

func TestMarshalLoadsBack(t *testing.T) {
	s := testSchema()
	c := s.Defaults()
	c.API.Peers = []string{"a"}
	c.API.Labels = map[string]string{"k": "v"}
	c.API.Period = Duration(90 * time.Minute)
	c.Items = []testItem{{URL: "u", Audience: "a"}}
	out, err := s.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, []byte("period: 1h30m\n")) {
		t.Errorf("duration not written short:\n%s", out)
	}
	back, err := s.Parse("printed.yaml", out)
	if err != nil {
		t.Fatalf("printed configuration does not load back: %v\n%s", err, out)
	}
	again, err := s.Marshal(back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, out) || back.API.Period != c.API.Period || !reflect.DeepEqual(back.Items, c.Items) {
		t.Fatalf("round trip:\n%s\nbecame\n%s", out, again)
	}
}

func TestFlagSyntaxErrorsNameTheFlag(t *testing.T) {
	for _, args := range [][]string{{"--period", "7"}, {"--max-bytes", "lots"}, {"--label", "novalue"}, {"--memory", "h100=lots"}, {"--insecure=maybe"}} {
		_, err := load(t, "", nil, args...)
		if err == nil || !strings.Contains(err.Error(), strings.SplitN(args[0], "=", 2)[0]) {
			t.Errorf("%v: err %v, want one naming the flag", args, err)
		}
	}
}

func TestCheckFields(t *testing.T) {
	if err := testSchema().CheckFields(); err != nil {
		t.Fatal(err)
	}
	s := testSchema()
	s.Fields = slices.DeleteFunc(slices.Clone(s.Fields), func(f Field) bool { return f.Path == "api.scale" })
	s.Fields = append(s.Fields, Field{Path: "api.nope", Usage: "x"}, Field{Path: "items[].url", Flag: "url", Usage: "x"},
		Field{Path: "api.token", Flag: "token", Secret: true, Usage: "x"})
	err := s.CheckFields()
	for _, w := range []string{"api.scale: no Field documents it", "api.nope: no such leaf", "items[].url: listed twice",
		"items[].url: a field of a list element cannot have a flag", "a secret must not have a flag"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("CheckFields = %v, want it to say %q", err, w)
		}
	}
}

func TestJSONSchemaIsClosedAndDocumented(t *testing.T) {
	b, err := testSchema().JSONSchema("https://example.com/test.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		AdditionalProperties bool `json:"additionalProperties"`
		Properties           map[string]struct {
			Const                string `json:"const"`
			AdditionalProperties any    `json:"additionalProperties"`
			Properties           map[string]struct {
				Description string `json:"description"`
				Default     any    `json:"default"`
			} `json:"properties"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	api := doc.Properties["api"]
	if doc.AdditionalProperties || api.AdditionalProperties != false || doc.Properties["kind"].Const != "TestConfiguration" {
		t.Errorf("schema not closed or kind not constant:\n%s", b)
	}
	if p := api.Properties["period"]; p.Default != "1s" || !strings.Contains(p.Description, "flag --period; env T_PERIOD") {
		t.Errorf("api.period = %+v", p)
	}
	if p := api.Properties["token"]; p.Default != nil || !strings.Contains(p.Description, "Secret") {
		t.Errorf("api.token = %+v", p)
	}
}

func TestDurationString(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0s", time.Second: "1s", time.Minute: "1m", 168 * time.Hour: "168h",
		90 * time.Second: "1m30s", time.Hour + time.Second: "1h0m1s", 1500 * time.Millisecond: "1.5s"} {
		if got := Duration(d).String(); got != want {
			t.Errorf("%v: %q, want %q", d, got, want)
		}
		var back Duration
		if err := back.UnmarshalText([]byte(Duration(d).String())); err != nil || back.D() != d {
			t.Errorf("%v does not parse back: %v %v", d, back, err)
		}
	}
}

func TestIsInvalid(t *testing.T) {
	_, err := load(t, header+"x: 1\n", nil)
	if !IsInvalid(err) || IsInvalid(errors.New("other")) {
		t.Fatal("IsInvalid")
	}
}

func TestSuggest(t *testing.T) {
	names := []string{"tls", "certFile", "grpcAddr", "period"}
	for key, want := range map[string]string{"tlsCrt": "tls", "cert": "certFile", "grpcAdr": "grpcAddr", "GRPCADDR": "grpcAddr", "perod": "period", "zzz": ""} {
		if got := suggest(key, names); got != want {
			t.Errorf("suggest(%q) = %q, want %q", key, got, want)
		}
	}
}
