package api

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// restRoute is one REST binding of a meridian.v1 RPC, read from its
// google.api.http option.
type restRoute struct {
	method   string // HTTP method
	template string // as written in the .proto, e.g. /v1/workloads/{id}:cancel
	rpc      string // full method, /meridian.v1.WorkloadService/CancelWorkload
	input    protoreflect.MessageDescriptor
	body     string   // "", "*" or the request field that is the body
	pathVars []string // request field paths bound by the URL path
}

// key is how a route is looked up from the pattern grpc-gateway matched.
func (r *restRoute) key() string { return r.method + " " + patternString(r.template) }

// bodyDescriptor is the message the request body decodes into, or nil.
func (r *restRoute) bodyDescriptor() protoreflect.MessageDescriptor {
	switch r.body {
	case "":
		return nil
	case "*":
		return r.input
	}
	if fd := r.input.Fields().ByName(protoreflect.Name(r.body)); fd != nil && fd.Kind() == protoreflect.MessageKind {
		return fd.Message()
	}
	return nil
}

var shortVar = regexp.MustCompile(`\{([^}=]+)\}`)

// patternString writes a template the way runtime.Pattern.String does:
// `{id}` becomes `{id=*}`.
func patternString(template string) string {
	return shortVar.ReplaceAllString(template, "{$1=*}")
}

var (
	routesOnce sync.Once
	routeList  []*restRoute
	routeByKey map[string]*restRoute
	routeMux   *runtime.ServeMux // matches paths only, for Allow headers
)

// restRoutes returns every REST route of the meridian.v1 services, in a
// fixed order, and an index by key.
func restRoutes() ([]*restRoute, map[string]*restRoute) {
	routesOnce.Do(func() {
		_ = meridianv1.File_meridian_v1_workload_proto // make sure the package is linked
		routeByKey = map[string]*restRoute{}
		protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
			if fd.Package() != "meridian.v1" {
				return true
			}
			svcs := fd.Services()
			for i := 0; i < svcs.Len(); i++ {
				sd := svcs.Get(i)
				ms := sd.Methods()
				for j := 0; j < ms.Len(); j++ {
					md := ms.Get(j)
					rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
					if rule == nil {
						continue
					}
					for _, b := range append([]*annotations.HttpRule{rule}, rule.GetAdditionalBindings()...) {
						if r := newRoute(sd, md, b); r != nil {
							routeList = append(routeList, r)
							routeByKey[r.key()] = r
						}
					}
				}
			}
			return true
		})
		slices.SortFunc(routeList, func(a, b *restRoute) int { return strings.Compare(a.key(), b.key()) })
		routeMux = runtime.NewServeMux(runtime.WithRoutingErrorHandler(func(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, _ http.ResponseWriter, _ *http.Request, _ int) {
		}))
		for _, r := range routeList {
			_ = routeMux.HandlePath(r.method, r.template, func(w http.ResponseWriter, _ *http.Request, _ map[string]string) {
				w.WriteHeader(http.StatusNoContent)
			})
		}
	})
	return routeList, routeByKey
}

func newRoute(sd protoreflect.ServiceDescriptor, md protoreflect.MethodDescriptor, b *annotations.HttpRule) *restRoute {
	r := &restRoute{rpc: "/" + string(sd.FullName()) + "/" + string(md.Name()), input: md.Input(), body: b.GetBody()}
	switch p := b.GetPattern().(type) {
	case *annotations.HttpRule_Get:
		r.method, r.template = http.MethodGet, p.Get
	case *annotations.HttpRule_Post:
		r.method, r.template = http.MethodPost, p.Post
	case *annotations.HttpRule_Put:
		r.method, r.template = http.MethodPut, p.Put
	case *annotations.HttpRule_Patch:
		r.method, r.template = http.MethodPatch, p.Patch
	case *annotations.HttpRule_Delete:
		r.method, r.template = http.MethodDelete, p.Delete
	default:
		return nil
	}
	for _, m := range regexp.MustCompile(`\{([^}=]+)`).FindAllStringSubmatch(r.template, -1) {
		r.pathVars = append(r.pathVars, m[1])
	}
	return r
}

// allowedMethods lists the methods that have a route for r's path, in
// sorted order.
func allowedMethods(r *http.Request) []string {
	routes, _ := restRoutes()
	seen, tried := map[string]bool{}, map[string]bool{}
	for _, rt := range routes {
		if tried[rt.method] {
			continue
		}
		tried[rt.method] = true
		probe, err := http.NewRequestWithContext(r.Context(), rt.method, r.URL.String(), nil)
		if err != nil {
			continue
		}
		rec := &statusRecorder{header: http.Header{}}
		routeMux.ServeHTTP(rec, probe)
		if rec.code == http.StatusNoContent {
			seen[rt.method] = true
		}
	}
	out := make([]string, 0, len(seen))
	for m := range seen {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// statusRecorder remembers the status a handler wrote and drops the rest.
type statusRecorder struct {
	header http.Header
	code   int
}

func (s *statusRecorder) Header() http.Header { return s.header }
func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return len(b), nil
}
func (s *statusRecorder) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
}

// String is "GET /v1/workloads/{id}", for messages.
func (r *restRoute) String() string { return fmt.Sprintf("%s %s", r.method, r.template) }
