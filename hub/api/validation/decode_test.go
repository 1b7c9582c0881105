package validation

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

const goodYAML = `# A two pod set training job.
name: train-resnet
queue: acme/vision/train
priority: 10
preemptible: true
clusterSelector:
  region: eu-west-1
podSets:
  - name: launcher
    replicas: 1
    resources: {cpuMilli: 2000, memoryMib: 4096}
  - name: worker
    replicas: 4
    minReplicas: 2
    topology: TOPOLOGY_NVLINK_DOMAIN
    resources:
      gpuMilli: 8000
      acceleratorClass: nvidia-h100-80gb
runtime:
  container:
    image: ghcr.io/acme/train:1.2
    args: ["--epochs", "3"]
    env: {DEBUG: "yes"}
  extra:
    priorityClassName: research
labels:
  team: vision
idempotencyKey: submit-0001
`

const goodJSON = `{
  "queue": "acme",
  "pod_sets": [
    {"name": "main", "replicas": 1,
     "resources": {"gpu_milli": 250, "fractional_mode": "FRACTIONAL_MODE_MPS"}}
  ],
  "runtime": {"slurm": {"script": "#!/bin/bash\nsrun hostname\n", "time_limit": "3600s"}}
}`

func TestDecodeWorkloadGood(t *testing.T) {
	tests := map[string]struct {
		doc   string
		check func(t *testing.T, w *meridianv1.Workload)
	}{
		"yaml camelCase": {goodYAML, func(t *testing.T, w *meridianv1.Workload) {
			if w.GetQueue() != "acme/vision/train" || len(w.GetPodSets()) != 2 {
				t.Fatalf("queue/pod sets not decoded: %v", w)
			}
			ps := w.GetPodSets()[1]
			if ps.GetResources().GetGpuMilli() != 8000 || ps.GetMinReplicas() != 2 ||
				ps.GetTopology() != meridianv1.Topology_TOPOLOGY_NVLINK_DOMAIN {
				t.Errorf("worker pod set = %v", ps)
			}
			if got := w.GetRuntime().GetContainer().GetEnv()["DEBUG"]; got != "yes" {
				t.Errorf("env DEBUG = %q, want quoted yes kept as a string", got)
			}
			if got := w.GetRuntime().GetExtra().GetFields()["priorityClassName"].GetStringValue(); got != "research" {
				t.Errorf("runtime.extra.priorityClassName = %q", got)
			}
			if err := ValidateWorkload(w); err != nil {
				t.Errorf("decoded example does not validate: %v", err)
			}
		}},
		"json snake_case": {goodJSON, func(t *testing.T, w *meridianv1.Workload) {
			r := w.GetPodSets()[0].GetResources()
			if r.GetGpuMilli() != 250 || r.GetFractionalMode() != meridianv1.FractionalMode_FRACTIONAL_MODE_MPS {
				t.Errorf("resources = %v", r)
			}
			if d := w.GetRuntime().GetSlurm().GetTimeLimit().AsDuration().Seconds(); d != 3600 {
				t.Errorf("time limit = %vs, want 3600", d)
			}
			if err := ValidateWorkload(w); err != nil {
				t.Errorf("decoded example does not validate: %v", err)
			}
		}},
		"invalid but decodable": {"queue: Bad Queue\npodSets: []\n", func(t *testing.T, w *meridianv1.Workload) {
			if w.GetQueue() != "Bad Queue" {
				t.Errorf("queue = %q", w.GetQueue())
			}
			if ValidateWorkload(w) == nil {
				t.Error("decoding must not validate; validation must then fail")
			}
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w, err := DecodeWorkload([]byte(tc.doc))
			if err != nil {
				t.Fatalf("DecodeWorkload() error = %v", err)
			}
			tc.check(t, w)
		})
	}
}

func TestDecodeWorkloadYAMLAndJSONAgree(t *testing.T) {
	fromYAML, err := DecodeWorkload([]byte(goodYAML))
	if err != nil {
		t.Fatal(err)
	}
	js, err := protojson.Marshal(fromYAML)
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := DecodeWorkload(js)
	if err != nil {
		t.Fatalf("re-decoding marshalled JSON: %v", err)
	}
	if !proto.Equal(fromYAML, fromJSON) {
		t.Fatalf("YAML and JSON decodes differ:\n%v\n%v", fromYAML, fromJSON)
	}
}

func TestDecodeWorkloadErrors(t *testing.T) {
	tests := map[string]struct {
		doc       string
		wantField string
		wantLine  int
		wantMsg   string
	}{
		"unknown top-level field": {"queue: a\nqueu: b\n", "queu", 2, `unknown field "queu"`},
		"unknown nested field": {"queue: a\npodSets:\n  - name: x\n    resources:\n      gpuMili: 3\n",
			"podSets[0].resources.gpuMili", 5, "unknown field"},
		"wrong type in second pod set": {"queue: a\npodSets:\n- name: x\n  replicas: 1\n- name: z\n  replicas: many\n",
			"podSets[1].replicas", 6, "invalid value for int32"},
		"unquoted yes in string": {"queue: a\nname: yes\n", "name", 2, "quote the value"},
		"bad enum": {"queue: a\npodSets:\n- name: x\n  topology: TOPOLOGY_ROW\n",
			"podSets[0].topology", 4, "TOPOLOGY_ROW"},
		"json wrong type": {"{\n  \"queue\": \"a\",\n  \"priority\": \"high\"\n}", "priority", 3, "invalid value for int32"},
		"int32 overflow":  {"queue: a\npriority: 99999999999\n", "priority", 2, "invalid value"},
		"two runtimes": {"runtime:\n  container: {image: x}\n  slurm: {script: y}\n",
			"runtime.slurm", 3, "oneof"},
		"duplicate key":    {"queue: a\nqueue: b\n", "", 2, "already set"},
		"syntax error":     {"queue: [a, b\n", "", 0, "not valid YAML or JSON"},
		"top-level list":   {"- a\n- b\n", "", 1, "must be a mapping"},
		"top-level scalar": {"hello\n", "", 1, "must be a mapping"},
		"empty":            {"  \n\t\n", "", 0, "empty"},
		"not utf8":         {"queue: \xff\xfe\n", "", 0, "UTF-8"},
		"too large":        {"queue: a\n#" + strings.Repeat("x", MaxDocumentBytes), "", 0, "1 MiB"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w, err := DecodeWorkload([]byte(tc.doc))
			if err == nil {
				t.Fatalf("DecodeWorkload() = %v, want an error", w)
			}
			var de *DecodeError
			if !errors.As(err, &de) || !IsDecodeError(err) {
				t.Fatalf("error %T is not a *DecodeError", err)
			}
			if de.Field != tc.wantField {
				t.Errorf("Field = %q, want %q (err: %v)", de.Field, tc.wantField, err)
			}
			if tc.wantLine != 0 && de.Line != tc.wantLine {
				t.Errorf("Line = %d, want %d (err: %v)", de.Line, tc.wantLine, err)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("error %q does not contain %q", err, tc.wantMsg)
			}
			if de.Err == nil || errors.Unwrap(err) != de.Err {
				t.Error("DecodeError does not unwrap to its cause")
			}
		})
	}
}

func TestJSONPathAt(t *testing.T) {
	js := []byte(`{"a":1,"b":[{"c":true},{"d":"x","e":[7,8]}],"f":{}}`)
	tests := map[string]struct {
		at   string // first occurrence of this text marks the offset
		want string
	}{
		"top key":         {`"a"`, "a"},
		"top value":       {`1`, "a"},
		"array elem key":  {`"c"`, "b[0].c"},
		"second elem val": {`"x"`, "b[1].d"},
		"nested array":    {`8`, "b[1].e[1]"},
		"empty object":    {`{}`, "f"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			off := bytes.Index(js, []byte(tc.at))
			if off < 0 {
				t.Fatalf("%q not in document", tc.at)
			}
			if got := formatPath(jsonPathAt(js, off)); got != tc.want {
				t.Fatalf("path at %q = %q, want %q", tc.at, got, tc.want)
			}
		})
	}
}
