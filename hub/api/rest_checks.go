package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// This file holds the checks the REST gateway makes before a request
// reaches gRPC, so that what grpc-gateway would ignore or report in its own
// words gets an InvalidArgument with a BadRequest field violation instead:
// unknown or misspelt query parameters (rejected, not ignored), values
// that do not parse (pageSize=abc), enum values (phase=QUEUED is accepted
// as WORKLOAD_PHASE_QUEUED; a wrong one lists the valid values), and
// unknown fields in request bodies.

// violation is one field problem.
type violation struct{ field, desc string }

// badRequest is an InvalidArgument carrying every violation.
func badRequest(vs []violation) error {
	if len(vs) == 0 {
		return nil
	}
	br := &errdetails.BadRequest{}
	msgs := make([]string, 0, len(vs))
	for _, v := range vs {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: v.field, Description: v.desc})
		msgs = append(msgs, v.field+": "+v.desc)
	}
	st := status.New(codes.InvalidArgument, strings.Join(msgs, "; "))
	if d, err := st.WithDetails(br); err == nil {
		return d.Err()
	}
	return st.Err()
}

// checkMiddleware checks query parameters and bodies of the route
// grpc-gateway matched, and answers 400 itself when they are wrong.
func checkMiddleware(mux **runtime.ServeMux) runtime.Middleware {
	return func(next runtime.HandlerFunc) runtime.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request, pathParams map[string]string) {
			pat, ok := runtime.HTTPPattern(r.Context())
			if !ok {
				next(w, r, pathParams)
				return
			}
			_, byKey := restRoutes()
			rt := byKey[r.Method+" "+pat.String()]
			if rt == nil {
				next(w, r, pathParams)
				return
			}
			if err := checkQuery(rt, r); err != nil {
				_, out := runtime.MarshalerForRequest(*mux, r)
				runtime.HTTPError(r.Context(), *mux, out, w, r, err)
				return
			}
			// SubmitWorkload decodes its body itself (YAML too, with lines).
			if rt.rpc != "/meridian.v1.WorkloadService/SubmitWorkload" {
				if err := checkBody(rt, r); err != nil {
					_, out := runtime.MarshalerForRequest(*mux, r)
					runtime.HTTPError(r.Context(), *mux, out, w, r, err)
					return
				}
			}
			next(w, r, pathParams)
		}
	}
}

// checkQuery validates r's query parameters against rt's request message
// and rewrites short enum names to full ones.
func checkQuery(rt *restRoute, r *http.Request) error {
	if r.URL.RawQuery == "" {
		return nil
	}
	values, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return badRequest([]violation{{"query", fmt.Sprintf("the query string does not parse: %v", err)}})
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var vs []violation
	changed := false
	for _, k := range keys {
		if rt.body == "*" {
			vs = append(vs, violation{k, fmt.Sprintf("query parameter %q is not accepted: %s takes its fields in the JSON body", k, rt)})
			continue
		}
		path, fd, problem := resolveParam(rt.input, k)
		if problem != "" {
			vs = append(vs, violation{k, problem + "; " + acceptedParams(rt)})
			continue
		}
		if where := boundElsewhere(rt, path); where != "" {
			vs = append(vs, violation{path, fmt.Sprintf("query parameter %q is not accepted: the field is %s", k, where)})
			continue
		}
		vals := values[k]
		if !fd.IsList() && len(vals) > 1 {
			vs = append(vs, violation{path, fmt.Sprintf("query parameter %q is given %d times; it takes one value", k, len(vals))})
			continue
		}
		for i, v := range vals {
			nv, problem := checkParamValue(fd, v)
			if problem != "" {
				vs = append(vs, violation{path, fmt.Sprintf("query parameter %q: %s", k, problem)})
				continue
			}
			if nv != v {
				vals[i], changed = nv, true
			}
		}
	}
	if len(vs) > 0 {
		return badRequest(vs)
	}
	if changed {
		r.URL.RawQuery = values.Encode()
		r.Form = nil
	}
	return nil
}

// resolveParam finds the field a query key names, by proto or JSON name,
// dotted for nested fields. It returns the proto field path.
func resolveParam(md protoreflect.MessageDescriptor, key string) (string, protoreflect.FieldDescriptor, string) {
	var path []string
	var fd protoreflect.FieldDescriptor
	for i, part := range strings.Split(key, ".") {
		if md == nil {
			return "", nil, fmt.Sprintf("unknown query parameter %q", key)
		}
		fd = md.Fields().ByName(protoreflect.Name(part))
		if fd == nil {
			fd = md.Fields().ByJSONName(part)
		}
		if fd == nil {
			return "", nil, fmt.Sprintf("unknown query parameter %q", key)
		}
		path = append(path, string(fd.Name()))
		md = nil
		if fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap() && !isWellKnown(fd.Message()) {
			md = fd.Message()
		}
		if i == len(strings.Split(key, "."))-1 && md != nil {
			return "", nil, fmt.Sprintf("query parameter %q names a message; name one of its fields (%s.<field>)", key, key)
		}
	}
	if fd.IsMap() || (fd.Kind() == protoreflect.MessageKind && !isWellKnown(fd.Message())) {
		return "", nil, fmt.Sprintf("query parameter %q cannot be set in the query string", key)
	}
	return strings.Join(path, "."), fd, ""
}

func isWellKnown(md protoreflect.MessageDescriptor) bool {
	return md.ParentFile().Package() == "google.protobuf"
}

// boundElsewhere says where a field comes from when it is part of the URL
// path or the body, which grpc-gateway would silently prefer.
func boundElsewhere(rt *restRoute, path string) string {
	for _, v := range rt.pathVars {
		if path == v || strings.HasPrefix(path, v+".") || strings.HasPrefix(v, path+".") {
			return "part of the URL path"
		}
	}
	if rt.body != "" && (path == rt.body || strings.HasPrefix(path, rt.body+".")) {
		return "part of the JSON body"
	}
	return ""
}

// acceptedParams lists the query parameters rt takes, in JSON names.
func acceptedParams(rt *restRoute) string {
	var names []string
	fs := rt.input.Fields()
	for i := 0; i < fs.Len(); i++ {
		fd := fs.Get(i)
		if boundElsewhere(rt, string(fd.Name())) != "" || fd.IsMap() || (fd.Kind() == protoreflect.MessageKind && !isWellKnown(fd.Message())) {
			continue
		}
		names = append(names, fd.JSONName())
	}
	if len(names) == 0 {
		return rt.String() + " takes no query parameters"
	}
	return rt.String() + " accepts " + strings.Join(names, ", ")
}

// checkParamValue checks one value and returns it, an enum's short name
// made full; or a plain-words problem.
func checkParamValue(fd protoreflect.FieldDescriptor, v string) (string, string) {
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		if _, err := strconv.ParseInt(v, 10, 32); err != nil {
			return "", fmt.Sprintf("%q is not a whole number in the 32-bit range", v)
		}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if _, err := strconv.ParseInt(v, 10, 64); err != nil {
			return "", fmt.Sprintf("%q is not a whole number in the 64-bit range", v)
		}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		if _, err := strconv.ParseUint(v, 10, 32); err != nil {
			return "", fmt.Sprintf("%q is not a non-negative whole number in the 32-bit range", v)
		}
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if _, err := strconv.ParseUint(v, 10, 64); err != nil {
			return "", fmt.Sprintf("%q is not a non-negative whole number in the 64-bit range", v)
		}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		if _, err := strconv.ParseFloat(v, 64); err != nil {
			return "", fmt.Sprintf("%q is not a number", v)
		}
	case protoreflect.BoolKind:
		if _, err := strconv.ParseBool(v); err != nil {
			return "", fmt.Sprintf("%q is not true or false", v)
		}
	case protoreflect.EnumKind:
		return enumValue(fd.Enum(), v)
	case protoreflect.MessageKind:
		// Well-known types: parse as the gateway will, to report it here.
		m := dynamicpb.NewMessage(fd.Message())
		if fd.Message().FullName() == "google.protobuf.FieldMask" {
			return v, "" // comma-separated paths; the RPC checks them
		}
		if err := protojson.Unmarshal([]byte(strconv.Quote(v)), m); err != nil {
			return "", fmt.Sprintf("%q is not a valid %s", v, fd.Message().Name())
		}
	}
	return v, ""
}

// enumValue accepts an enum value by full name (WORKLOAD_PHASE_QUEUED),
// short name (QUEUED, any case) or number, and returns the full name.
func enumValue(ed protoreflect.EnumDescriptor, v string) (string, string) {
	vals := ed.Values()
	prefix := enumPrefix(ed)
	up := strings.ToUpper(v)
	if n, err := strconv.ParseInt(v, 10, 32); err == nil {
		if ev := vals.ByNumber(protoreflect.EnumNumber(n)); ev != nil {
			return string(ev.Name()), ""
		}
	}
	for _, cand := range []string{v, up, prefix + up} {
		if ev := vals.ByName(protoreflect.Name(cand)); ev != nil {
			return string(ev.Name()), ""
		}
	}
	var names []string
	for i := 0; i < vals.Len(); i++ {
		if vals.Get(i).Number() == 0 {
			continue
		}
		names = append(names, strings.TrimPrefix(string(vals.Get(i).Name()), prefix))
	}
	return "", fmt.Sprintf("%q is not a valid %s; use one of %s (the prefix %s may be added, e.g. %s)",
		v, ed.Name(), strings.Join(names, ", "), prefix, prefix+names[0])
}

// enumPrefix is the common prefix of an enum's value names, taken from its
// zero value: WORKLOAD_PHASE_ for WORKLOAD_PHASE_UNSPECIFIED.
func enumPrefix(ed protoreflect.EnumDescriptor) string {
	if z := ed.Values().ByNumber(0); z != nil {
		if n := string(z.Name()); strings.HasSuffix(n, "_UNSPECIFIED") {
			return strings.TrimSuffix(n, "UNSPECIFIED")
		}
	}
	return ""
}

// checkBody reads a JSON body, reports unknown fields by their path and
// values protojson cannot decode by their field, and puts the body back.
func checkBody(rt *restRoute, r *http.Request) error {
	md := rt.bodyDescriptor()
	if md == nil || r.Body == nil {
		return nil
	}
	body, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &runtime.HTTPStatusError{HTTPStatus: http.StatusRequestEntityTooLarge, Err: invalid("body", "request body is larger than %d bytes", mbe.Limit)}
		}
		return invalid("body", "could not read the request body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	var raw any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return invalid("body", "is not valid JSON: %v", err)
	}
	var vs []violation
	unknownFields(md, raw, "", &vs)
	if len(vs) > 0 {
		return badRequest(vs)
	}
	if err := protojson.Unmarshal(body, dynamicpb.NewMessage(md)); err != nil {
		return invalid(protojsonField(err), "%s", protojsonMessage(err))
	}
	return nil
}

// unknownFields appends a violation for every JSON key of v that md does
// not have, with its path (proto names, [index] for lists).
func unknownFields(md protoreflect.MessageDescriptor, v any, prefix string, vs *[]violation) {
	obj, ok := v.(map[string]any)
	if !ok || isWellKnown(md) {
		return
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fd := md.Fields().ByJSONName(k)
		if fd == nil {
			fd = md.Fields().ByName(protoreflect.Name(k))
		}
		if fd == nil {
			if strings.HasPrefix(k, "@") || (strings.HasPrefix(k, "[") && strings.HasSuffix(k, "]")) {
				continue // Any type URLs and extensions: protojson judges them
			}
			var names []string
			for i := 0; i < md.Fields().Len(); i++ {
				names = append(names, md.Fields().Get(i).JSONName())
			}
			*vs = append(*vs, violation{prefix + k, fmt.Sprintf("unknown field %q; %s has %s", k, md.Name(), strings.Join(names, ", "))})
			continue
		}
		path := prefix + string(fd.Name())
		if fd.Kind() != protoreflect.MessageKind || fd.IsMap() {
			continue
		}
		if fd.IsList() {
			if arr, ok := obj[k].([]any); ok {
				for i, e := range arr {
					unknownFields(fd.Message(), e, fmt.Sprintf("%s[%d].", path, i), vs)
				}
			}
			continue
		}
		unknownFields(fd.Message(), obj[k], path+".", vs)
	}
}

var (
	protojsonFieldRE = regexp.MustCompile(`field (\w+)`)
	protojsonPosRE   = regexp.MustCompile(`^proto:\s*(\(line \d+:\d+\)):\s*`)
)

// protojsonMessage makes a protojson error plain words: "invalid value
// for int32 field weight: "heavy" (line 1:36)".
func protojsonMessage(err error) string {
	msg := strings.ReplaceAll(err.Error(), "\u00a0", " ")
	if m := protojsonPosRE.FindStringSubmatch(msg); m != nil {
		return strings.TrimPrefix(msg, m[0]) + " " + m[1]
	}
	return strings.TrimSpace(strings.TrimPrefix(msg, "proto:"))
}

// protojsonField picks the field name out of a protojson error, or "body".
func protojsonField(err error) string {
	if m := protojsonFieldRE.FindStringSubmatch(err.Error()); m != nil {
		return m[1]
	}
	return "body"
}

// routingError answers requests no route takes: 405 with an Allow header
// when the path exists with other methods, and the gateway's usual answer
// otherwise.
func routingError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	if httpStatus == http.StatusMethodNotAllowed {
		allow := allowedMethods(r)
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
		}
		writeStatus(w, m, http.StatusMethodNotAllowed, status.Errorf(codes.Unimplemented,
			"method %s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.Join(allow, ", ")))
		return
	}
	if httpStatus == http.StatusNotFound {
		runtime.HTTPError(ctx, mux, m, w, r, status.Errorf(codes.NotFound, "no route for %s %s; see docs/api.md for the REST routes", r.Method, r.URL.Path))
		return
	}
	runtime.DefaultRoutingErrorHandler(ctx, mux, m, w, r, httpStatus)
}

// errorHandler is the gateway's error handler: an If-Match mismatch is
// 412 Precondition Failed; everything else maps as usual.
func errorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if isETagMismatch(err) {
		err = &runtime.HTTPStatusError{HTTPStatus: http.StatusPreconditionFailed, Err: err}
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}
