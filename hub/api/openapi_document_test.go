package api

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// swaggerDoc is the part of an OpenAPI v2 document the checks read.
type swaggerDoc struct {
	Host                string                                 `json:"host"`
	Schemes             []string                               `json:"schemes"`
	SecurityDefinitions map[string]swaggerSecurityScheme       `json:"securityDefinitions"`
	Security            []map[string][]string                  `json:"security"`
	Paths               map[string]map[string]swaggerOperation `json:"paths"`
	Definitions         map[string]swaggerSchema               `json:"definitions"`
}

type swaggerSecurityScheme struct {
	Type string `json:"type"`
	In   string `json:"in"`
	Name string `json:"name"`
}

type swaggerOperation struct {
	Description string             `json:"description"`
	Produces    []string           `json:"produces"`
	XStream     string             `json:"x-stream"`
	Parameters  []swaggerParameter `json:"parameters"`
	// Security overrides the document's; absent means the document's.
	Security *[]map[string][]string `json:"security"`
}

type swaggerParameter struct {
	Name   string        `json:"name"`
	In     string        `json:"in"`
	Schema swaggerSchema `json:"schema"`
}

type swaggerSchema struct {
	Properties map[string]swaggerSchema `json:"properties"`
	ReadOnly   bool                     `json:"readOnly"`
}

func loadSwagger(t *testing.T) swaggerDoc {
	t.Helper()
	b, err := os.ReadFile("../../proto/meridian/v1/meridian.swagger.json")
	if err != nil {
		t.Fatal(err)
	}
	var d swaggerDoc
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

func (o swaggerOperation) param(name, in string) *swaggerParameter {
	for i, p := range o.Parameters {
		if p.Name == name && p.In == in {
			return &o.Parameters[i]
		}
	}
	return nil
}

// The traps a client generated from the OpenAPI document falls into
// (go-swagger and the like): writable server-set fields, https first with
// no host, undeclared headers and mask, a stream read as one object.
func TestOpenAPIDocumentForGeneratedClients(t *testing.T) {
	d := loadSwagger(t)

	if len(d.Schemes) == 0 || d.Schemes[0] != "http" || !slices.Contains(d.Schemes, "https") {
		t.Errorf("schemes %v: want http first (the demo is plain HTTP), then https", d.Schemes)
	}
	if d.Host == "" {
		t.Error("no host: generated clients have no default address")
	}

	// Authentication is on (the demo too): a generated client must be
	// able to send the bearer credential without hand edits, so the
	// document declares it and every operation requires it.
	var scheme string
	for name, sd := range d.SecurityDefinitions {
		if sd.Type == "apiKey" && sd.In == "header" && sd.Name == "Authorization" {
			scheme = name
		}
	}
	if scheme == "" {
		t.Errorf("securityDefinitions %v: want an apiKey in the Authorization header (Bearer TOKEN)", d.SecurityDefinitions)
	} else if len(d.Security) != 1 || d.Security[0][scheme] == nil {
		t.Errorf("document security %v: want every operation to require %q", d.Security, scheme)
	}
	for p, ops := range d.Paths {
		for m, op := range ops {
			if op.Security != nil && len(*op.Security) == 0 {
				t.Errorf("%s %s is marked as needing no credential, but every API call needs one", strings.ToUpper(m), p)
			}
		}
	}

	readOnly := map[string][]string{
		"v1Workload": {"id", "createTime", "status"},
		"v1Queue":    {"status", "createTime", "updateTime"},
	}
	for def, props := range readOnly {
		for _, p := range props {
			if !d.Definitions[def].Properties[p].ReadOnly {
				t.Errorf("%s.%s is set by the server but not readOnly", def, p)
			}
		}
	}

	submit := d.Paths["/v1/workloads"]["post"]
	if submit.param("Idempotency-Key", "header") == nil {
		t.Error("POST /v1/workloads does not declare the Idempotency-Key header")
	}

	patch := d.Paths["/v1/queues/{queue.path}"]["patch"]
	if patch.param("updateMask", "query") == nil && patch.param("update_mask", "query") == nil {
		t.Error("PATCH /v1/queues/{queue.path} does not declare the update_mask query parameter")
	}
	if patch.param("If-Match", "header") == nil {
		t.Error("PATCH /v1/queues/{queue.path} does not declare If-Match")
	}
	body := patch.param("queue", "body")
	if body == nil {
		t.Fatal("PATCH /v1/queues/{queue.path} has no body parameter")
	}
	for _, p := range readOnly["v1Queue"] {
		if !body.Schema.Properties[p].ReadOnly {
			t.Errorf("PATCH body property %s is not readOnly", p)
		}
	}
	if !strings.Contains(patch.Description, "null") {
		t.Errorf("PATCH description does not say how null is treated: %q", patch.Description)
	}
	if d.Paths["/v1/queues/{path}"]["delete"].param("If-Match", "header") == nil {
		t.Error("DELETE /v1/queues/{path} does not declare If-Match")
	}

	watch := d.Paths["/v1/workloads:watch"]["get"]
	if !slices.Contains(watch.Produces, "application/x-ndjson") || watch.XStream != "ndjson" {
		t.Errorf("watch produces %v, x-stream %q: want application/x-ndjson and x-stream ndjson", watch.Produces, watch.XStream)
	}
	if !strings.Contains(strings.ToLower(watch.Description), "newline-delimited") {
		t.Errorf("watch description does not say it is a stream: %q", watch.Description)
	}
}

// Every REST route in the document is known to the gateway's checks, and
// the other way round, so query and body checks cover all of them.
func TestRESTRouteTableMatchesDocument(t *testing.T) {
	d := loadSwagger(t)
	routes, byKey := restRoutes()
	var fromDoc []string
	for p, ops := range d.Paths {
		for m := range ops {
			fromDoc = append(fromDoc, strings.ToUpper(m)+" "+p)
		}
	}
	var fromTable []string
	for _, r := range routes {
		// The document writes {path=**} as {path}.
		tmpl := strings.ReplaceAll(r.template, "=**}", "}")
		fromTable = append(fromTable, r.method+" "+tmpl)
		if byKey[r.key()] != r {
			t.Errorf("route %s not indexed", r)
		}
	}
	slices.Sort(fromDoc)
	slices.Sort(fromTable)
	if !slices.Equal(fromDoc, fromTable) {
		t.Errorf("document routes %v\ngateway checks %v", fromDoc, fromTable)
	}
}
