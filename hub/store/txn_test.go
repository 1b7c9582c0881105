package store

import (
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/meridian-gpu/meridian/hub/leader"
)

// TestTxnRequest: every op becomes its compare and write, in order, under
// the fence's compare; a check only compares.
func TestTxnRequest(t *testing.T) {
	fence := &leader.Fence{Key: "/leader/1", Rev: 7}
	ops := []Op{Put("/a", []byte("1")), PutIfModRev("/b", []byte("2"), 3), Delete("/c", 4), DeleteAny("/d"), Check("/e", 5)}
	req, checked, err := txnRequest(fence, ops)
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Compare) != 1 || string(req.Compare[0].Key) != "/leader/1" || req.Compare[0].GetCreateRevision() != 7 {
		t.Fatalf("fence compare %v", req.Compare)
	}
	inner := req.Success[0].GetRequestTxn()
	var cmps []string
	for _, c := range inner.Compare {
		cmps = append(cmps, fmt.Sprintf("%s@%d", c.Key, c.GetModRevision()))
	}
	if got, want := fmt.Sprint(cmps), "[/b@3 /c@4 /e@5]"; got != want {
		t.Fatalf("compares %s, want %s", got, want)
	}
	var writes []string
	for _, w := range inner.Success {
		switch r := w.Request.(type) {
		case *pb.RequestOp_RequestPut:
			writes = append(writes, "put "+string(r.RequestPut.Key)+"="+string(r.RequestPut.Value))
		case *pb.RequestOp_RequestDeleteRange:
			writes = append(writes, "delete "+string(r.RequestDeleteRange.Key))
		default:
			t.Fatalf("unexpected write %T", r)
		}
	}
	if got, want := fmt.Sprint(writes), "[put /a=1 put /b=2 delete /c delete /d]"; got != want {
		t.Fatalf("writes %s, want %s", got, want)
	}
	if len(checked) != 3 {
		t.Fatalf("checked %d ops, want 3", len(checked))
	}
	if _, _, err := txnRequest(nil, []Op{Put("/a", nil), Put("/a", nil)}); err == nil {
		t.Fatal("two ops on one key: want an error")
	}
}

// TestTxnRequestAllocations: building a commit of many puts costs a few
// arrays, not objects per op (a cycle commits dozens of dispatches at
// once, and the API batches of submits).
func TestTxnRequestAllocations(t *testing.T) {
	ops := make([]Op, 64)
	for i := range ops {
		ops[i] = PutIfModRev(fmt.Sprintf("/meridian/workloads/wl-%04d", i), []byte("x"), int64(i+1))
	}
	fence := &leader.Fence{Key: "/leader/1", Rev: 7}
	allocs := testing.AllocsPerRun(20, func() {
		if _, _, err := txnRequest(fence, ops); err != nil {
			t.Fatal(err)
		}
	})
	// A few arrays, the seen map's buckets and the fence's request: none
	// per op (it was 7 per op).
	if limit := 40.0; allocs > limit {
		t.Fatalf("%v allocations for %d ops, want at most %v", allocs, len(ops), limit)
	}
	t.Logf("%v allocations for %d conditional puts", allocs, len(ops))
}
