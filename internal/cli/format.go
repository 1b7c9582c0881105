package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// marshalJSON renders m as indented JSON with proto field names, the same
// names field violations use. protojson output is deliberately unstable in
// its whitespace, so it is compacted and re-indented to be byte-stable.
func marshalJSON(m proto.Message, indent bool) ([]byte, error) {
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s as JSON: %w", m.ProtoReflect().Descriptor().Name(), err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, fmt.Errorf("compact JSON: %w", err)
	}
	if !indent {
		return compact.Bytes(), nil
	}
	var out bytes.Buffer
	if err := json.Indent(&out, compact.Bytes(), "", "  "); err != nil {
		return nil, fmt.Errorf("indent JSON: %w", err)
	}
	return out.Bytes(), nil
}

// writeMessage prints m as JSON or YAML according to -o. It must not be
// called for table output.
func (a *app) writeMessage(m proto.Message) error {
	js, err := marshalJSON(m, true)
	if err != nil {
		return err
	}
	return a.writeJSONBytes(js)
}

// writeJSONBytes prints an indented JSON document as JSON or YAML.
func (a *app) writeJSONBytes(js []byte) error {
	w := a.env.Stdout
	if a.output == "yaml" {
		y, err := yaml.JSONToYAML(js)
		if err != nil {
			return fmt.Errorf("encode YAML: %w", err)
		}
		_, err = w.Write(y)
		return err
	}
	if _, err := w.Write(js); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// table is an aligned text table: columns separated by two spaces, no
// trailing blanks.
type table struct {
	out io.Writer
	buf bytes.Buffer
	tw  *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{out: w}
	t.tw = tabwriter.NewWriter(&t.buf, 0, 0, 2, ' ', 0)
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		// A tab or newline inside a cell would break the alignment.
		cells[i] = cellReplacer.Replace(c)
	}
	// Every row keeps all its cells: a short row would end tabwriter's
	// column block and break the alignment of the rows after it.
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

var cellReplacer = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ")

// flush aligns the rows and writes them without trailing blanks.
func (t *table) flush() error {
	if err := t.tw.Flush(); err != nil {
		return err
	}
	lines := strings.SplitAfter(t.buf.String(), "\n")
	var b strings.Builder
	for _, l := range lines {
		if l == "" {
			continue
		}
		b.WriteString(strings.TrimRight(l, " \n"))
		b.WriteString("\n")
	}
	t.buf.Reset()
	_, err := io.WriteString(t.out, b.String())
	return err
}

// protoPrefix matches the "proto:" prefix protobuf-go puts on its errors;
// it is followed by a space or, in some builds, a no-break space, which
// would make messages differ from build to build.
var protoPrefix = regexp.MustCompile("proto:[ \u00a0]")

// cleanProtoError removes protobuf-go's prefix from an error message.
func cleanProtoError(msg string) string {
	return protoPrefix.ReplaceAllString(msg, "")
}

// gpus formats GPU milli as GPUs: 8000 -> "8", 500 -> "0.5", 2250 ->
// "2.25".
func gpus(milli int64) string {
	if milli%1000 == 0 {
		return strconv.FormatInt(milli/1000, 10)
	}
	s := strconv.FormatFloat(float64(milli)/1000, 'f', 3, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// mib formats MiB as a short size: 81920 -> "80Gi", 512 -> "512Mi".
func mib(v int64) string {
	switch {
	case v == 0:
		return "-"
	case v%(1024*1024) == 0:
		return strconv.FormatInt(v/(1024*1024), 10) + "Ti"
	case v%1024 == 0:
		return strconv.FormatInt(v/1024, 10) + "Gi"
	default:
		return strconv.FormatInt(v, 10) + "Mi"
	}
}

// age formats how long ago t was, like kubectl: 45s, 3m12s, 2h5m, 3d4h.
// A missing time is "-".
func age(now time.Time, t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	return duration(now.Sub(t.AsTime()))
}

// duration formats d with the two most significant units.
func duration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%dm", s/3600, (s%3600)/60)
	default:
		return fmt.Sprintf("%dd%dh", s/86400, (s%86400)/3600)
	}
}

// timestamp formats t in UTC, RFC 3339, or "-".
func timestamp(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	return t.AsTime().UTC().Format(time.RFC3339)
}

// dash returns s, or "-" when it is empty.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// enumName strips an enum value's type prefix: WORKLOAD_PHASE_QUEUED ->
// QUEUED.
func enumName(full, prefix string) string {
	return strings.TrimPrefix(full, prefix)
}

func phaseName(p meridianv1.WorkloadPhase) string {
	if p == meridianv1.WorkloadPhase_WORKLOAD_PHASE_UNSPECIFIED {
		return "-"
	}
	return enumName(p.String(), "WORKLOAD_PHASE_")
}

func clusterStateName(s meridianv1.ClusterState) string {
	if s == meridianv1.ClusterState_CLUSTER_STATE_UNSPECIFIED {
		return "-"
	}
	return enumName(s.String(), "CLUSTER_STATE_")
}

// modeName formats a fractional mode as users write it: mps, mig,
// time-slice.
func modeName(m meridianv1.FractionalMode) string {
	if m == meridianv1.FractionalMode_FRACTIONAL_MODE_UNSPECIFIED {
		return "any"
	}
	return strings.ReplaceAll(strings.ToLower(enumName(m.String(), "FRACTIONAL_MODE_")), "_", "-")
}

func topologyName(t meridianv1.Topology) string {
	if t == meridianv1.Topology_TOPOLOGY_UNSPECIFIED {
		return "cluster"
	}
	return strings.ReplaceAll(strings.ToLower(enumName(t.String(), "TOPOLOGY_")), "_", "-")
}

func connectorName(c meridianv1.ConnectorKind) string {
	if c == meridianv1.ConnectorKind_CONNECTOR_KIND_UNSPECIFIED {
		return "-"
	}
	return strings.ToLower(enumName(c.String(), "CONNECTOR_KIND_"))
}

// requestedMilli is the GPU milli a workload asks for at full size.
func requestedMilli(w *meridianv1.Workload) int64 {
	var sum int64
	for _, ps := range w.GetPodSets() {
		sum += int64(ps.GetResources().GetGpuMilli()) * int64(ps.GetReplicas())
	}
	return sum
}
