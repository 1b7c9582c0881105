package api

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// Lists are served from the watch cache's ordered index when the service
// has a cache, and from etcd otherwise. Both must page the same way:
// newest first, with the same filters, tokens that continue where the last
// page ended, and a write finished before the list is always seen.
func TestListFromCacheMatchesEtcd(t *testing.T) {
	e := newEnv(t)
	noCache := newEnv(t, func(d *Deps) { d.Workloads = nil })
	ctx := testCtx(t)
	tn := tenant(t)
	a, b := tn+"/a", tn+"/b"
	e.mkQueues(t, tn, a, b)
	var ids []string
	for i := 0; i < 23; i++ {
		q := a
		if i%3 == 0 {
			q = b
		}
		w := validWorkload(q)
		w.Labels = map[string]string{"n": fmt.Sprint(i % 2)}
		r, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: w})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.GetWorkload().GetId())
	}
	// Cancel one, so that a phase filter has something to find.
	if _, err := e.wl.CancelWorkload(ctx, &meridianv1.CancelWorkloadRequest{Id: ids[4]}); err != nil {
		t.Fatal(err)
	}
	list := func(c meridianv1.WorkloadServiceClient, req *meridianv1.ListWorkloadsRequest) (out []string, pages int) {
		t.Helper()
		for {
			resp, err := c.ListWorkloads(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, w := range resp.GetWorkloads() {
				out = append(out, w.GetId())
			}
			if resp.GetNextPageToken() == "" || pages > 100 {
				return out, pages
			}
			req.PageToken = resp.GetNextPageToken()
		}
	}
	cases := []*meridianv1.ListWorkloadsRequest{
		{Queue: tn, PageSize: 1},
		{Queue: tn, PageSize: 4},
		{Queue: tn, PageSize: 1000},
		{Queue: b, PageSize: 3},
		{Queue: tn, LabelSelector: "n=1", PageSize: 2},
		{Queue: tn, Phase: []meridianv1.WorkloadPhase{meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED}, PageSize: 2},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("queue=%s,size=%d,labels=%q,phases=%v", c.GetQueue(), c.GetPageSize(), c.GetLabelSelector(), c.GetPhase()), func(t *testing.T) {
			fromCache, cachePages := list(e.wl, &meridianv1.ListWorkloadsRequest{Queue: c.Queue, PageSize: c.PageSize, LabelSelector: c.LabelSelector, Phase: c.Phase})
			fromEtcd, _ := list(noCache.wl, &meridianv1.ListWorkloadsRequest{Queue: c.Queue, PageSize: c.PageSize, LabelSelector: c.LabelSelector, Phase: c.Phase})
			if !slices.Equal(fromCache, fromEtcd) {
				t.Fatalf("from the cache %v\nfrom etcd      %v", fromCache, fromEtcd)
			}
			if len(fromCache) == 0 {
				t.Fatal("the case lists nothing; it checks nothing")
			}
			if want := (len(fromCache) + int(c.GetPageSize()) - 1) / int(c.GetPageSize()); cachePages < want {
				t.Fatalf("%d items in %d pages of at most %d", len(fromCache), cachePages, c.GetPageSize())
			}
		})
	}
	// The whole tenant, newest first.
	all, _ := list(e.wl, &meridianv1.ListWorkloadsRequest{Queue: tn, PageSize: 5})
	want := slices.Clone(ids)
	slices.Reverse(want)
	if !slices.Equal(all, want) {
		t.Fatalf("listed %v\nwant newest first %v", all, want)
	}
}

// A page ends early once its workloads add up to maxPageBytes, so that
// large workloads cannot make a list fail for everyone with "received
// message larger than max" (the default gRPC client accepts 4 MiB), and
// paging still returns every workload once.
func TestListPagesAreCappedByBytes(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	tn := tenant(t)
	e.mkQueues(t, tn, tn+"/big")
	const n = 20 // 20 x 250 KiB = 5 MiB: more than one default gRPC message
	want := map[string]bool{}
	for i := 0; i < n; i++ {
		w := validWorkload(tn + "/big")
		w.Runtime.GetContainer().Env = map[string]string{"BLOB": strings.Repeat("x", 250*1024)}
		r, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: w})
		if err != nil {
			t.Fatal(err)
		}
		want[r.GetWorkload().GetId()] = true
	}
	req := &meridianv1.ListWorkloadsRequest{Queue: tn, PageSize: 1000}
	got, pages := map[string]bool{}, 0
	for {
		resp, err := e.wl.ListWorkloads(ctx, req)
		if err != nil {
			t.Fatalf("page %d: %v", pages+1, err)
		}
		pages++
		if size := proto.Size(resp); size > 2*maxPageBytes {
			t.Fatalf("page %d is %d bytes; pages are capped near %d", pages, size, maxPageBytes)
		}
		for _, w := range resp.GetWorkloads() {
			if got[w.GetId()] {
				t.Fatalf("workload %s listed twice", w.GetId())
			}
			got[w.GetId()] = true
		}
		if resp.GetNextPageToken() == "" || pages > n {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	if len(got) != n || pages < 4 {
		t.Fatalf("listed %d of %d workloads in %d pages; want all, in at least 4 pages", len(got), n, pages)
	}
	for id := range want {
		if !got[id] {
			t.Fatalf("workload %s was never listed", id)
		}
	}
}
