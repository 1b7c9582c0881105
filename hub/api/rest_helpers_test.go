package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	_ "google.golang.org/genproto/googleapis/rpc/errdetails" // registers BadRequest for Any decoding
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-gpu/meridian/hub/api/validation"
)

type restResp struct {
	code int
	body []byte
}

// rest sends one request to the gateway.
func (e *env) rest(t testing.TB, method, path string, body []byte, hdr map[string]string) restResp {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return restResp{code: resp.StatusCode, body: b}
}

// decode parses a success body into m, failing the test on an error status.
func (r restResp) decode(t testing.TB, m proto.Message) {
	t.Helper()
	if r.code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", r.code, r.body)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(r.body, m); err != nil {
		t.Fatalf("decode %T: %v\n%s", m, err, r.body)
	}
}

// status parses an error body as a gRPC status.
func (r restResp) status(t testing.TB) *status.Status {
	t.Helper()
	var sp spb.Status
	if err := protojson.Unmarshal(r.body, &sp); err != nil {
		t.Fatalf("HTTP %d body is not a status: %v\n%s", r.code, err, r.body)
	}
	return status.FromProto(&sp)
}

// fields lists the violated field names in err.
func fields(err error) []string {
	var out []string
	for _, v := range validation.FieldViolations(err) {
		out = append(out, v.GetField())
	}
	return out
}

func mustJSON(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func rawJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func wantCode(t testing.TB, err error, c codes.Code) {
	t.Helper()
	if status.Code(err) != c {
		t.Fatalf("got %v (%v), want %v", status.Code(err), err, c)
	}
}
