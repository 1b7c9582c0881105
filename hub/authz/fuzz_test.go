package authz

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/fieldmaskpb"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// FuzzAuthorize: random subjects, paths, verbs, methods and requests never
// panic, and the same input always gives the same decisions, from the
// same Authorizer and from one built again.
func FuzzAuthorize(f *testing.F) {
	f.Add("alice", "vision", "", "acme/vision", "w-vision", workloadSvc+"SubmitWorkload", int32(5), true, "weight,quotas", uint8(3))
	f.Add("", "", "tok1", "globex/x", "w-globex", workloadSvc+"CancelWorkload", int32(-1), false, "", uint8(0))
	f.Add("bob", "acme-admins", "", "acme//x", "", queueSvc+"UpdateQueue", int32(1_000_001), false, "access", uint8(31))
	f.Add("root", "platform", "t", "a/b/c/d", "x", "/nope", int32(0), true, "path,revision", uint8(16))
	f.Add("ü", "\x00", "token:", "/", "\xff", MethodCreateAPIToken, int32(-2147483648), true, ",,.", uint8(255))
	f.Fuzz(func(t *testing.T, user, group, tokenID, path, id, method string, prio int32, preemptible bool, mask string, verbBits uint8) {
		build := func() *Authorizer {
			q := stdTree()
			// The fuzzed subject also appears in an access list when that
			// is valid input.
			var verbs []Verb
			for i, v := range allVerbs {
				if verbBits&(1<<i) != 0 {
					verbs = append(verbs, v)
				}
			}
			extra := Queues{}
			for k, v := range q {
				extra[k] = v
			}
			pol := extra[path]
			pol.Access = append(append([]Entry(nil), pol.Access...), Entry{Subject: "user:" + user, Verbs: verbs})
			extra[path] = pol
			if a, err := New(stdConfig(), extra); err == nil {
				return a
			}
			return mustNew(t, stdConfig(), q)
		}
		s := Subject{User: user, Groups: []string{group, "vision"}, TokenID: tokenID}
		if verbBits&0x80 != 0 {
			s.TokenPermissions = []Permission{Permission(group), PermTokensCreate}
		}
		var maskPaths []string
		if mask != "" {
			maskPaths = strings.Split(mask, ",")
		}
		res := stdResolver()
		res.queues[id] = path
		res.tokens[id] = user
		reqs := []any{
			nil,
			&meridianv1.SubmitWorkloadRequest{Workload: &meridianv1.Workload{Queue: path, Priority: prio, Preemptible: preemptible}},
			&meridianv1.UpdateQueueRequest{Queue: &meridianv1.Queue{Path: path}, UpdateMask: &fieldmaskpb.FieldMask{Paths: maskPaths}},
			&meridianv1.CancelWorkloadRequest{Id: id},
			&meridianv1.GetQueueRequest{Path: path},
			(*meridianv1.GetWorkloadRequest)(nil),
		}
		run := func(a *Authorizer) []Decision {
			p := a.Bind(s)
			var out []Decision
			for _, req := range reqs {
				out = append(out, p.AuthorizeMethod(method, req, res.resolvers()))
				for _, r := range table {
					out = append(out, p.AuthorizeMethod(r.Method, req, res.resolvers()))
				}
			}
			tg := Target{Queue: path, Workload: id, Token: id, Owner: user, Priority: prio, Preemptible: preemptible,
				Fields: QueueFieldsFromMask(maskPaths), Permissions: maskPaths}
			for _, act := range append(allActions, Action(method)) {
				out = append(out, p.Authorize(act, tg))
			}
			out = append(out, p.AuthorizeAll(ActWorkloadCancel, []Target{workloadT(id), tg}, res.resolvers()))
			out = append(out, p.CanGrant(maskPaths))
			f := p.Filter()
			if f.Visible(path) != p.CanView(path) {
				t.Fatalf("Filter().Visible and CanView disagree on %q", path)
			}
			visible := Decision{Allowed: f.Visible(path), Reason: strings.Join(f.Prefixes(), ",")}
			if !visible.Allowed {
				visible.Code = CodeNotFound
			}
			return append(out, visible)
		}
		a := build()
		d1, d2, d3 := run(a), run(a), run(build())
		if !reflect.DeepEqual(d1, d2) || !reflect.DeepEqual(d1, d3) {
			t.Fatal("decisions are not deterministic")
		}
		for _, d := range d1 {
			if d.Allowed != (d.Code == CodeOK) {
				t.Fatalf("Allowed=%v with code %s", d.Allowed, d.Code)
			}
		}
	})
}
