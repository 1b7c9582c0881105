package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// queuePatchTemplate is UpdateQueue's REST route, as in queue.proto.
const queuePatchTemplate = "/v1/queues/{queue.path=**}"

// HandleQueuePatch serves PATCH /v1/queues/{path} on mux in place of the
// generated handler, which derives the update mask from every key in the
// body: a generated client that sends `"quotas": null` for a weight-only
// update would wipe the quotas, and a body `path` that differs from the
// URL's would be silently ignored. Here:
//
//   - the `update_mask` query parameter, when given, is the mask, and a
//     field it names that is null or absent in the body is cleared;
//   - otherwise the mask is the body's keys with a non-null value, less
//     `path`, `revision` and the output-only fields;
//   - a body `path` different from the URL's is InvalidArgument on
//     `queue.path`;
//   - If-Match travels as gRPC metadata (see checkIfMatch).
//
// It must be called after the generated handlers are registered.
func HandleQueuePatch(mux *runtime.ServeMux, client meridianv1.QueueServiceClient, maxBody int64) error {
	if maxBody <= 0 {
		maxBody = DefaultMaxRequestBytes
	}
	return mux.HandlePath(http.MethodPatch, queuePatchTemplate, func(w http.ResponseWriter, r *http.Request, params map[string]string) {
		_, out := runtime.MarshalerForRequest(mux, r)
		req, err := decodeQueuePatch(r, params["queue.path"], maxBody)
		if err != nil {
			runtime.HTTPError(r.Context(), mux, out, w, r, err)
			return
		}
		ctx, err := runtime.AnnotateContext(r.Context(), mux, r, "/meridian.v1.QueueService/UpdateQueue", runtime.WithHTTPPathPattern(queuePatchTemplate))
		if err != nil {
			runtime.HTTPError(r.Context(), mux, out, w, r, err)
			return
		}
		resp, err := client.UpdateQueue(ctx, req)
		if err != nil {
			runtime.HTTPError(ctx, mux, out, w, r, err)
			return
		}
		runtime.ForwardResponseMessage(ctx, mux, out, w, r, resp, mux.GetForwardResponseOptions()...)
	})
}

// queueOutputOnly are the Queue fields a PATCH body may carry (generated
// clients echo them back) but that never enter a derived mask.
var queueOutputOnly = map[string]bool{"path": true, "revision": true, "status": true, "create_time": true, "update_time": true}

func decodeQueuePatch(r *http.Request, urlPath string, maxBody int64) (*meridianv1.UpdateQueueRequest, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &runtime.HTTPStatusError{HTTPStatus: http.StatusRequestEntityTooLarge, Err: invalid("body", "request body is larger than %d bytes", mbe.Limit)}
		}
		return nil, invalid("body", "could not read the request body: %v", err)
	}
	if int64(len(body)) > maxBody {
		return nil, &runtime.HTTPStatusError{HTTPStatus: http.StatusRequestEntityTooLarge, Err: invalid("body", "request body is larger than %d bytes", maxBody)}
	}
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(body, &keys); err != nil {
		return nil, invalid("queue", "the body must be a JSON object with the queue's fields: %v", err)
	}
	q := &meridianv1.Queue{}
	// Unknown fields were reported by checkBody, by path.
	if err := (protojson.UnmarshalOptions{}).Unmarshal(body, q); err != nil {
		return nil, invalid(protojsonField(err), "%s", protojsonMessage(err))
	}
	if q.GetPath() != "" && q.GetPath() != urlPath {
		return nil, invalid("queue.path", "is %q in the body but %q in the URL; leave it out of the body or make them equal", q.GetPath(), urlPath)
	}
	q.Path = urlPath
	req := &meridianv1.UpdateQueueRequest{Queue: q}

	q2 := r.URL.Query()
	if masks := append(q2["update_mask"], q2["updateMask"]...); len(masks) > 0 {
		var paths []string
		for _, m := range masks {
			for _, p := range strings.Split(m, ",") {
				if p = strings.TrimSpace(p); p != "" {
					paths = append(paths, queueFieldName(p))
				}
			}
		}
		if len(paths) == 0 {
			return nil, invalid("update_mask", "is empty; name the fields to change (weight, quotas, description) or leave the parameter out")
		}
		req.UpdateMask = &fieldmaskpb.FieldMask{Paths: paths}
		return req, nil
	}
	var paths []string
	for k, v := range keys {
		if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			continue
		}
		name := queueFieldName(k)
		if queueOutputOnly[name] {
			continue
		}
		paths = append(paths, name)
	}
	slices.Sort(paths)
	if len(paths) == 0 {
		// Nothing to change: "path" alone is a no-op mask (an empty mask
		// would mean every field).
		paths = []string{"path"}
	}
	req.UpdateMask = &fieldmaskpb.FieldMask{Paths: paths}
	return req, nil
}

// queueFieldName turns a JSON or proto field name of Queue into the proto
// name; unknown names are returned as given (UpdateQueue rejects them).
func queueFieldName(k string) string {
	top, rest, _ := strings.Cut(k, ".")
	fields := (&meridianv1.Queue{}).ProtoReflect().Descriptor().Fields()
	fd := fields.ByJSONName(top)
	if fd == nil {
		fd = fields.ByName(protoreflect.Name(top))
	}
	if fd == nil {
		return k
	}
	if rest != "" {
		return string(fd.Name()) + "." + rest
	}
	return string(fd.Name())
}
