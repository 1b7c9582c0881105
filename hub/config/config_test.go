package config

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	cc "github.com/meridian-gpu/meridian/internal/componentconfig"
)

var update = flag.Bool("update", false, "rewrite docs/config/hub.schema.json")

const (
	examplePath = "../../examples/config/hub.yaml"
	schemaPath  = "../../docs/config/hub.schema.json"
	schemaID    = "https://github.com/meridian-gpu/meridian/docs/config/hub.schema.json"
)

func TestFieldsDocumentEveryLeaf(t *testing.T) {
	if err := NewSchema(Options{}).CheckFields(); err != nil {
		t.Fatal(err)
	}
}

// TestExampleIsValidAndShowsEveryDefault loads examples/config/hub.yaml:
// it must validate, hold exactly the defaults, and name every field.
func TestExampleIsValidAndShowsEveryDefault(t *testing.T) {
	b, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSchema(Options{})
	c, err := s.Parse("hub.yaml", b)
	if err != nil {
		t.Fatalf("the example does not validate:\n%v", err)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Errorf("the example's values are not the defaults:\n got %+v\nwant %+v", c, Default())
	}
	text := string(b)
	for _, f := range Fields {
		key := f.Path[strings.LastIndexAny(f.Path, ".]")+1:]
		if !strings.Contains(text, " "+key+":") && !strings.HasPrefix(text, key+":") && !strings.Contains(text, "\n"+key+":") {
			t.Errorf("the example does not show %s", f.Path)
		}
		if f.Flag != "" && !strings.Contains(text, "--"+f.Flag) {
			t.Errorf("the example does not name --%s for %s", f.Flag, f.Path)
		}
		for _, e := range f.Env {
			if !strings.Contains(text, e) {
				t.Errorf("the example does not name %s for %s", e, f.Path)
			}
		}
	}
}

// TestJSONSchemaUpToDate fails when docs/config/hub.schema.json is not
// what the Go types give; go test ./hub/config -run JSONSchema -update
// rewrites it.
func TestJSONSchemaUpToDate(t *testing.T) {
	got, err := NewSchema(Options{}).JSONSchema(schemaID)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(schemaPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(schemaPath)
	if err != nil {
		t.Fatalf("%v (run go test ./hub/config -run JSONSchema -update)", err)
	}
	if string(got) != string(want) {
		t.Fatalf("%s is stale: run go test ./hub/config -run JSONSchema -update", filepath.Base(schemaPath))
	}
}

func TestPrintedDefaultsLoadBack(t *testing.T) {
	s := NewSchema(Options{})
	out, err := s.Marshal(Default())
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Parse("printed.yaml", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Fatalf("printed defaults load back as %+v", c)
	}
}

func hubFile(body string) []byte {
	return []byte("apiVersion: meridian.io/v1alpha1\nkind: HubConfiguration\n" + body)
}

func TestAuthSection(t *testing.T) {
	s := NewSchema(Options{})
	c, err := s.Parse("hub.yaml", hubFile(`auth:
  oidc:
    issuers:
      - issuerURL: https://login.example.com
        audience: meridian
        usernamePrefix: "corp:"
      - issuerURL: http://127.0.0.1:5556/dex
        audience: test
        usernameClaim: email
  authorization:
    groupPermissions:
      "corp:admins": [admin, queues.write]
    userPermissions:
      "corp:alice": [queues.read]
api:
  tls: {certFile: c.pem, keyFile: k.pem, clientCAFile: ca.pem}
audit: {file: "-", retention: 48h, maxEvents: 10}
`))
	if err != nil {
		t.Fatal(err)
	}
	is := c.Auth.OIDC.Issuers
	if len(is) != 2 || is[0].UsernameClaim != "sub" || is[0].GroupsClaim != "groups" || is[1].UsernameClaim != "email" || is[0].UsernamePrefix != "corp:" {
		t.Errorf("issuers %+v: want the claims defaulted, the given ones kept", is)
	}
	if c.Auth.Mode != AuthOn || !slices.Equal(c.Auth.Authorization.GroupPermissions["corp:admins"], []string{"admin", "queues.write"}) {
		t.Errorf("auth %+v", c.Auth)
	}
	if c.API.TLS.ClientCAFile != "ca.pem" || c.Audit.File != "-" || c.Audit.Retention.D().Hours() != 48 || c.Audit.MaxEvents != 10 {
		t.Errorf("tls %+v audit %+v", c.API.TLS, c.Audit)
	}
	if got := c.PlaintextNonLoopback(); got != nil {
		t.Errorf("with TLS, PlaintextNonLoopback = %v", got)
	}
}

func TestAuthValidation(t *testing.T) {
	for name, tc := range map[string]struct {
		body string
		want []string
	}{
		"bad mode": {"auth: {mode: off}\n", []string{`auth.mode: want on or none (got "off")`}},
		"none beyond loopback": {"auth: {mode: none}\napi: {httpAddr: \"0.0.0.0:8080\"}\n",
			[]string{`auth.mode: "none" serves every caller without authentication; it is allowed only on loopback, and api.httpAddr is "0.0.0.0:8080"`}},
		"issuer problems": {`auth:
  oidc:
    issuers:
      - audience: a
      - issuerURL: http://idp.example.com
      - issuerURL: https://a.example.com
        audience: a
      - issuerURL: https://a.example.com
        audience: b
`, []string{"auth.oidc.issuers[0].issuerURL: required", "auth.oidc.issuers[1].issuerURL: want an https URL",
			"auth.oidc.issuers[1].audience: required", `auth.oidc.issuers[3].issuerURL: "https://a.example.com" is also auth.oidc.issuers[2]`}},
		"empty permission": {"auth: {authorization: {userPermissions: {bob: [\"\"]}}}\n", []string{"auth.authorization.userPermissions.bob[0]: permission must not be empty"}},
		"tls halves":       {"api: {tls: {certFile: c.pem, clientCAFile: ca.pem}}\n", []string{"api.tls.keyFile: required with api.tls.certFile"}},
		"client CA alone":  {"api: {tls: {clientCAFile: ca.pem}}\n", []string{"api.tls.clientCAFile: mutual TLS needs a server certificate"}},
		"audit negative":   {"audit: {retention: -1h, maxEvents: -1}\n", []string{"audit.retention: must be 0", "audit.maxEvents: must be 0"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewSchema(Options{}).Parse("hub.yaml", hubFile(tc.body))
			l, ok := cc.AsErrorList(err)
			if !ok {
				t.Fatalf("err %v, want an ErrorList", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("errors lack %q:\n%v", w, err)
				}
			}
			if len(l) != len(tc.want) {
				t.Errorf("%d errors, want %d:\n%v", len(l), len(tc.want), err)
			}
		})
	}
}

// TestPermissionHook: hub/authz's check runs on every permission, and its
// error is reported at the permission's path.
func TestPermissionHook(t *testing.T) {
	var checked []string
	s := NewSchema(Options{ValidatePermission: func(p string) error {
		checked = append(checked, p)
		if p == "root" {
			return errors.New(`unknown permission "root"`)
		}
		return nil
	}})
	_, err := s.Parse("hub.yaml", hubFile("auth:\n  authorization:\n    groupPermissions:\n      ops: [admin, root]\n"))
	if err == nil || !strings.Contains(err.Error(), `hub.yaml:5: auth.authorization.groupPermissions.ops[1]: unknown permission "root"`) {
		t.Fatalf("err %v", err)
	}
	if !slices.Equal(checked, []string{"admin", "root"}) {
		t.Fatalf("checked %v", checked)
	}
}

func TestPlaintextNonLoopback(t *testing.T) {
	c := Default()
	if got := c.PlaintextNonLoopback(); got != nil {
		t.Errorf("defaults: %v", got)
	}
	c.API.GRPCAddr, c.API.HTTPAddr = "0.0.0.0:7070", "[::1]:8080"
	if got := c.PlaintextNonLoopback(); !slices.Equal(got, []string{"api.grpcAddr"}) {
		t.Errorf("got %v", got)
	}
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "localhost:1": true, "[::1]:1": true, ":1": false, "10.0.0.1:1": false, "example.com:1": false} {
		if IsLoopback(addr) != want {
			t.Errorf("IsLoopback(%q) = %v", addr, !want)
		}
	}
}
