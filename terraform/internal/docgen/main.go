package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	tfjson "github.com/hashicorp/terraform-json"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/zclconf/go-cty/cty"

	"github.com/meridian-gpu/meridian/terraform/provider"
)

func main() {
	check := flag.Bool("check", false, "verify terraform/docs instead of writing it")
	root := flag.String("dir", "terraform", "the provider's directory (examples/, templates/, docs/)")
	schemaOut := flag.String("schema", "", "only write the provider schema JSON to this file")
	flag.Parse()
	if err := run(*root, *check, *schemaOut); err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
}

func run(root string, check bool, schemaOut string) error {
	js, err := SchemaJSON(context.Background())
	if err != nil {
		return err
	}
	if schemaOut != "" {
		return os.WriteFile(schemaOut, js, 0o644)
	}
	root, err = filepath.Abs(root)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "meridian-docgen-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	schemaFile := filepath.Join(tmp, "schema.json")
	if err := os.WriteFile(schemaFile, js, 0o644); err != nil {
		return err
	}
	// Render in a copy of the provider directory: tfplugindocs writes
	// templates and docs as it goes, and -check must change nothing.
	work := filepath.Join(tmp, "provider")
	for _, d := range []string{"examples", "templates"} {
		if err := copyDir(filepath.Join(root, d), filepath.Join(work, d)); err != nil {
			return err
		}
	}
	if err := tfplugindocs(root, work, schemaFile); err != nil {
		return err
	}
	got := filepath.Join(work, "docs")
	want := filepath.Join(root, "docs")
	if !check {
		if err := os.RemoveAll(want); err != nil {
			return err
		}
		return copyDir(got, want)
	}
	if diff := compareDirs(want, got); diff != "" {
		return fmt.Errorf("terraform/docs is out of date (%s): run make tf-docs", diff)
	}
	return nil
}

// tfplugindocs runs tfplugindocs generate on work from the tools module
// next to the repository's root.
func tfplugindocs(root, work, schemaFile string) error {
	mod := filepath.Join(filepath.Dir(root), "tools", "tfplugindocs")
	cmd := exec.Command("go", "-C", mod, "tool", "tfplugindocs", "generate",
		"--provider-dir", work, "--provider-name", provider.TypeName, "--rendered-provider-name", "Meridian",
		"--providers-schema", schemaFile)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("tfplugindocs generate: %v\n%s", err, out.String())
	}
	return nil
}

// SchemaJSON is what `terraform providers schema -json` prints for this
// provider, keyed by its short name.
func SchemaJSON(ctx context.Context) ([]byte, error) {
	srv := providerserver.NewProtocol6(provider.New("docs")())()
	resp, err := srv.GetProviderSchema(ctx, &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		return nil, err
	}
	for _, d := range resp.Diagnostics {
		if d.Severity == tfprotov6.DiagnosticSeverityError {
			return nil, fmt.Errorf("provider schema: %s: %s", d.Summary, d.Detail)
		}
	}
	ps := &tfjson.ProviderSchema{
		ResourceSchemas:   map[string]*tfjson.Schema{},
		DataSourceSchemas: map[string]*tfjson.Schema{},
	}
	if ps.ConfigSchema, err = convertSchema(resp.Provider); err != nil {
		return nil, err
	}
	for name, s := range resp.ResourceSchemas {
		if ps.ResourceSchemas[name], err = convertSchema(s); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	for name, s := range resp.DataSourceSchemas {
		if ps.DataSourceSchemas[name], err = convertSchema(s); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	out := tfjson.ProviderSchemas{FormatVersion: "1.0", Schemas: map[string]*tfjson.ProviderSchema{provider.TypeName: ps}}
	return json.MarshalIndent(out, "", "  ")
}

func convertSchema(s *tfprotov6.Schema) (*tfjson.Schema, error) {
	b, err := convertBlock(s.Block)
	if err != nil {
		return nil, err
	}
	return &tfjson.Schema{Version: uint64(s.Version), Block: b}, nil
}

func descKind(k interface{ String() string }) tfjson.SchemaDescriptionKind {
	if strings.EqualFold(k.String(), "markdown") {
		return tfjson.SchemaDescriptionKindMarkdown
	}
	return tfjson.SchemaDescriptionKindPlain
}

func convertBlock(b *tfprotov6.SchemaBlock) (*tfjson.SchemaBlock, error) {
	out := &tfjson.SchemaBlock{
		Attributes: map[string]*tfjson.SchemaAttribute{}, NestedBlocks: map[string]*tfjson.SchemaBlockType{},
		Description: b.Description, DescriptionKind: descKind(b.DescriptionKind), Deprecated: b.Deprecated,
	}
	for _, a := range b.Attributes {
		ca, err := convertAttribute(a)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.Name, err)
		}
		out.Attributes[a.Name] = ca
	}
	if len(b.BlockTypes) > 0 {
		return nil, fmt.Errorf("nested blocks are not supported here; the provider uses nested attributes")
	}
	return out, nil
}

var nesting = map[tfprotov6.SchemaObjectNestingMode]tfjson.SchemaNestingMode{
	tfprotov6.SchemaObjectNestingModeSingle: tfjson.SchemaNestingModeSingle,
	tfprotov6.SchemaObjectNestingModeList:   tfjson.SchemaNestingModeList,
	tfprotov6.SchemaObjectNestingModeSet:    tfjson.SchemaNestingModeSet,
	tfprotov6.SchemaObjectNestingModeMap:    tfjson.SchemaNestingModeMap,
}

func convertAttribute(a *tfprotov6.SchemaAttribute) (*tfjson.SchemaAttribute, error) {
	out := &tfjson.SchemaAttribute{
		Description: a.Description, DescriptionKind: descKind(a.DescriptionKind), Deprecated: a.Deprecated,
		Required: a.Required, Optional: a.Optional, Computed: a.Computed, Sensitive: a.Sensitive, WriteOnly: a.WriteOnly,
	}
	if a.NestedType != nil {
		nt := &tfjson.SchemaNestedAttributeType{Attributes: map[string]*tfjson.SchemaAttribute{}, NestingMode: nesting[a.NestedType.Nesting]}
		for _, na := range a.NestedType.Attributes {
			c, err := convertAttribute(na)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", na.Name, err)
			}
			nt.Attributes[na.Name] = c
		}
		out.AttributeNestedType = nt
		return out, nil
	}
	// tftypes and cty write types in the same JSON form.
	js, err := a.Type.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var t cty.Type
	if err := t.UnmarshalJSON(js); err != nil {
		return nil, fmt.Errorf("type %s: %w", js, err)
	}
	out.AttributeType = t
	return out, nil
}

func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) && p == src {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}

// compareDirs returns "" when both trees hold the same files with the
// same bytes, else what differs.
func compareDirs(want, got string) string {
	list := func(root string) map[string][]byte {
		m := map[string][]byte{}
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(root, p)
				m[rel], _ = os.ReadFile(p)
			}
			return nil
		})
		return m
	}
	w, g := list(want), list(got)
	var diffs []string
	for name, b := range g {
		if wb, ok := w[name]; !ok {
			diffs = append(diffs, name+" is missing")
		} else if !bytes.Equal(wb, b) {
			diffs = append(diffs, name+" differs")
		}
	}
	for name := range w {
		if _, ok := g[name]; !ok {
			diffs = append(diffs, name+" should not be there")
		}
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "; ")
}
