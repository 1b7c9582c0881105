package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meridian-gpu/meridian/hub/api/validation"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// NewGatewayMux returns a grpc-gateway mux that decodes bodies strictly
// (unknown fields are errors naming the field), writes JSON without unset
// fields, and passes the Idempotency-Key and If-Match headers through as
// gRPC metadata. It also:
//
//   - rejects unknown query parameters and values that do not parse with
//     an InvalidArgument naming the parameter (see rest_checks.go), and
//     accepts short enum names (phase=QUEUED);
//   - answers a wrong method with 405 and an Allow header;
//   - sets ETag on queue responses and answers an If-Match mismatch with
//     412;
//   - forwards no gRPC response metadata as Grpc-Metadata-* headers.
//
// Register the handlers on it with RegisterGateway.
func NewGatewayMux(extra ...runtime.ServeMuxOption) *runtime.ServeMux {
	var mux *runtime.ServeMux
	opts := []runtime.ServeMuxOption{
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: false},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}),
		runtime.WithIncomingHeaderMatcher(func(k string) (string, bool) {
			if strings.EqualFold(k, IdempotencyHeader) {
				return "idempotency-key", true
			}
			if strings.EqualFold(k, IfMatchHeader) {
				return "if-match", true
			}
			if strings.EqualFold(k, "X-Request-Id") {
				return "x-request-id", true
			}
			key, ok := runtime.DefaultHeaderMatcher(k)
			if ok && isReservedMetadata(key) {
				// Only the gateway itself says who the caller is.
				return "", false
			}
			return key, ok
		}),
		// The gRPC server's response headers (content-type and the like)
		// mean nothing to REST clients.
		runtime.WithOutgoingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithForwardResponseOption(setETag),
		runtime.WithRoutingErrorHandler(routingError),
		runtime.WithErrorHandler(errorHandler),
		runtime.WithMiddlewares(checkMiddleware(&mux)),
	}
	mux = runtime.NewServeMux(append(opts, extra...)...)
	return mux
}

// RegisterGateway registers every service's REST handlers on mux, calling
// the gRPC server through conn, then the strict submit handler and the
// queue PATCH handler that replace the generated ones.
func RegisterGateway(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn, maxBody int64) error {
	for name, reg := range map[string]func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error{
		"workload": meridianv1.RegisterWorkloadServiceHandler,
		"queue":    meridianv1.RegisterQueueServiceHandler,
		"cluster":  meridianv1.RegisterClusterServiceHandler,
		"admin":    meridianv1.RegisterAdminServiceHandler,
	} {
		if err := reg(ctx, mux, conn); err != nil {
			return fmt.Errorf("api: register %s gateway: %w", name, err)
		}
	}
	if err := HandleQueuePatch(mux, meridianv1.NewQueueServiceClient(conn), maxBody); err != nil {
		return fmt.Errorf("api: register queue PATCH: %w", err)
	}
	return HandleSubmit(mux, meridianv1.NewWorkloadServiceClient(conn), maxBody)
}

// HandleSubmit serves POST /v1/workloads on mux with DecodeWorkload, so a
// bad body gets an InvalidArgument naming the field and line, and YAML
// bodies work too. Bodies over maxBody bytes (0: DefaultMaxRequestBytes)
// get 413 with an InvalidArgument status naming `body`. It must be called
// after the generated handlers are registered (the last route wins).
func HandleSubmit(mux *runtime.ServeMux, client meridianv1.WorkloadServiceClient, maxBody int64) error {
	if maxBody <= 0 {
		maxBody = DefaultMaxRequestBytes
	}
	return mux.HandlePath(http.MethodPost, "/v1/workloads", func(w http.ResponseWriter, r *http.Request, _ map[string]string) {
		serveSubmit(mux, client, maxBody, w, r)
	})
}

func serveSubmit(mux *runtime.ServeMux, client meridianv1.WorkloadServiceClient, maxBody int64, w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	_, outbound := runtime.MarshalerForRequest(mux, r)
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeStatus(w, outbound, http.StatusRequestEntityTooLarge, invalid("body", "request body is larger than %d bytes", mbe.Limit))
			return
		}
		runtime.HTTPError(ctx, mux, outbound, w, r, invalid("body", "could not read the request body: %v", err))
		return
	}
	if int64(len(body)) > maxBody {
		writeStatus(w, outbound, http.StatusRequestEntityTooLarge, invalid("body", "request body is larger than %d bytes; the limit is %d", maxBody, maxBody))
		return
	}
	wl, err := validation.DecodeWorkload(body)
	if err != nil {
		field := "body"
		var de *validation.DecodeError
		if errors.As(err, &de) && de.Field != "" {
			field = de.Field
		}
		runtime.HTTPError(ctx, mux, outbound, w, r, invalid(field, "%v", err))
		return
	}
	// The same metadata as every generated route: credentials, request id,
	// idempotency key and what the gateway says of the caller.
	ctx, err = runtime.AnnotateContext(ctx, mux, r, "/meridian.v1.WorkloadService/SubmitWorkload", runtime.WithHTTPPathPattern("/v1/workloads"))
	if err != nil {
		runtime.HTTPError(r.Context(), mux, outbound, w, r, err)
		return
	}
	req := &meridianv1.SubmitWorkloadRequest{Workload: wl}
	// The non-body fields, as the gateway reads them: snake_case or
	// camelCase names, an enum by name or number.
	q := r.URL.Query()
	for _, f := range []struct {
		snake, camel string
		to           *bool
	}{{"reject_if_never_fits", "rejectIfNeverFits", &req.RejectIfNeverFits}, {"store_queued", "storeQueued", &req.StoreQueued}} {
		if err := queryBool(q, f.snake, f.camel, f.to); err != nil {
			runtime.HTTPError(ctx, mux, outbound, w, r, err)
			return
		}
	}
	if v := q.Get("view"); v != "" {
		view, err := parseView(v)
		if err != nil {
			runtime.HTTPError(ctx, mux, outbound, w, r, err)
			return
		}
		req.View = view
	}
	resp, err := client.SubmitWorkload(ctx, req)
	if err != nil {
		runtime.HTTPError(ctx, mux, outbound, w, r, err)
		return
	}
	runtime.ForwardResponseMessage(ctx, mux, outbound, w, r, resp, mux.GetForwardResponseOptions()...)
}

// queryBool sets *to from the boolean query parameter named snake or
// camel, when given; an error names the field.
func queryBool(q url.Values, snake, camel string, to *bool) error {
	for _, name := range []string{snake, camel} {
		if v := q.Get(name); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return invalid(snake, "query parameter %q: %q is not true or false", name, v)
			}
			*to = b
		}
	}
	return nil
}

// writeStatus writes a gRPC status as the gateway would, with an explicit
// HTTP code.
func writeStatus(w http.ResponseWriter, m runtime.Marshaler, httpCode int, err error) {
	st := status.Convert(err)
	if st.Code() == codes.OK {
		st = status.New(codes.Unknown, err.Error())
	}
	b, merr := m.Marshal(st.Proto())
	if merr != nil {
		http.Error(w, st.Message(), httpCode)
		return
	}
	w.Header().Set("Content-Type", m.ContentType(st.Proto()))
	w.WriteHeader(httpCode)
	_, _ = w.Write(b)
}
