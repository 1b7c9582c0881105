package config

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	cc "github.com/meridian-gpu/meridian/internal/componentconfig"
)

var update = flag.Bool("update", false, "rewrite docs/config/agent.schema.json")

const (
	examplePath = "../../examples/config/agent.yaml"
	schemaPath  = "../../docs/config/agent.schema.json"
	schemaID    = "https://github.com/meridian-gpu/meridian/docs/config/agent.schema.json"
)

func TestFieldsDocumentEveryLeaf(t *testing.T) {
	if err := NewSchema().CheckFields(); err != nil {
		t.Fatal(err)
	}
}

// TestExampleIsValidAndShowsEveryDefault loads examples/config/agent.yaml:
// it must validate, hold the defaults besides the required fields (and
// the simcluster example, which simcluster needs), and name every field.
func TestExampleIsValidAndShowsEveryDefault(t *testing.T) {
	b, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewSchema().Parse("agent.yaml", b)
	if err != nil {
		t.Fatalf("the example does not validate:\n%v", err)
	}
	want := Default()
	want.ClusterID, want.NATS.URL, want.Simcluster.Example = c.ClusterID, c.NATS.URL, c.Simcluster.Example
	if !reflect.DeepEqual(c, want) {
		t.Errorf("the example's values are not the defaults:\n got %+v\nwant %+v", c, want)
	}
	text := string(b)
	for _, f := range Fields {
		key := f.Path[strings.LastIndexAny(f.Path, ".]")+1:]
		if !strings.Contains(text, " "+key+":") && !strings.Contains(text, "\n"+key+":") {
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

// TestJSONSchemaUpToDate fails when docs/config/agent.schema.json is not
// what the Go types give; go test ./spoke-agent/config -run JSONSchema
// -update rewrites it.
func TestJSONSchemaUpToDate(t *testing.T) {
	got, err := NewSchema().JSONSchema(schemaID)
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
		t.Fatalf("%v (run go test ./spoke-agent/config -run JSONSchema -update)", err)
	}
	if string(got) != string(want) {
		t.Fatalf("%s is stale: run go test ./spoke-agent/config -run JSONSchema -update", filepath.Base(schemaPath))
	}
}

func agentFile(body string) []byte {
	return []byte("apiVersion: meridian.io/v1alpha1\nkind: AgentConfiguration\nclusterID: c1\nnats: {url: \"nats://hub:4222\"}\n" + body)
}

func TestConnectorSections(t *testing.T) {
	c, err := NewSchema().Parse("agent.yaml", agentFile(`connector: kubernetes
labels: {region: eu}
kubernetes:
  namespace: ml
  fractionalModes: [mig, hami]
  gang: kueue
  kueueQueue: team-a
  tolerate: [nvidia.com/gpu]
  classes: {NVIDIA-H100-80GB-HBM3: nvidia-h100-80gb}
slurm:
  cli: nonsense   # not the chosen connector: not checked
`))
	if err != nil {
		t.Fatal(err)
	}
	k := c.Kubernetes
	if k.Namespace != "ml" || len(k.FractionalModes) != 2 || k.KueueQueue != "team-a" || k.Tolerate[0] != "nvidia.com/gpu" || c.Labels["region"] != "eu" {
		t.Errorf("kubernetes %+v labels %v", k, c.Labels)
	}
}

func TestAgentValidationReportsEverything(t *testing.T) {
	_, err := NewSchema().Parse("agent.yaml", []byte(`apiVersion: meridian.io/v1alpha1
kind: AgentConfiguration
clusterID: a.b
connector: slurm
heartbeatInterval: 0s
launchParallelism: 0
metricsAddr: nope
simcluster: {example: h100-nvlink}
slurm:
  cli: off
  gpuMemoryMiB: {h100: -1}
`))
	l, ok := cc.AsErrorList(err)
	if !ok {
		t.Fatalf("err %v", err)
	}
	for _, p := range []string{"clusterID", "nats.url", "simcluster.example", "slurm.restURL", "slurm.gpuMemoryMiB.h100", "heartbeatInterval", "launchParallelism", "metricsAddr"} {
		found := false
		for _, e := range l {
			found = found || e.Path == p
		}
		if !found {
			t.Errorf("no error at %s:\n%v", p, err)
		}
	}
	if !strings.Contains(err.Error(), `agent.yaml:3: clusterID: cluster id "a.b" has invalid character '.'`) {
		t.Errorf("clusterID error:\n%v", err)
	}
}
