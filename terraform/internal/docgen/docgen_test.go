package main

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	tfjson "github.com/hashicorp/terraform-json"
)

// TestSchemaJSON checks that the schema docgen hands to tfplugindocs is
// what `terraform providers schema -json` would print: every resource and
// data source, nested attributes with their nesting, and the sensitive
// secret marked so.
func TestSchemaJSON(t *testing.T) {
	js, err := SchemaJSON(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got tfjson.ProviderSchemas
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("not a valid providers schema document: %v", err)
	}
	ps := got.Schemas["meridian"]
	if ps == nil {
		t.Fatalf("no schema for meridian: %s", js)
	}
	var names []string
	for n := range ps.ResourceSchemas {
		names = append(names, n)
	}
	for n := range ps.DataSourceSchemas {
		names = append(names, "data."+n)
	}
	slices.Sort(names)
	want := []string{"data.meridian_accelerator_classes", "data.meridian_clusters", "data.meridian_queue", "data.meridian_queues",
		"meridian_api_token", "meridian_cluster", "meridian_queue", "meridian_queue_access"}
	if !slices.Equal(names, want) {
		t.Errorf("schemas = %v, want %v", names, want)
	}
	quotas := ps.ResourceSchemas["meridian_queue"].Block.Attributes["quotas"]
	if quotas.AttributeNestedType == nil || quotas.AttributeNestedType.NestingMode != tfjson.SchemaNestingModeMap ||
		!quotas.AttributeNestedType.Attributes["nominal"].Required {
		t.Errorf("quotas = %+v, want a map of objects with a required nominal", quotas)
	}
	if !ps.ResourceSchemas["meridian_api_token"].Block.Attributes["secret"].Sensitive {
		t.Error("meridian_api_token.secret is not sensitive")
	}
	if !ps.ConfigSchema.Block.Attributes["token"].Sensitive {
		t.Error("the provider's token is not sensitive")
	}
}
