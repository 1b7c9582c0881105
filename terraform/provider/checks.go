package provider

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridian-gpu/meridian/hub/api/validation"
	"github.com/meridian-gpu/meridian/internal/editdist"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"github.com/meridian-gpu/meridian/terraform/internal/quantity"
)

// borrowViolation is one quota that could hold more than its parent.
type borrowViolation struct {
	class, field, msg string
}

// quotaFor returns q's entry for class, else its "*" entry, else nil.
func quotaFor(q *meridianv1.Queue, class string) *meridianv1.QueueQuota {
	var any *meridianv1.QueueQuota
	for _, qq := range q.GetQuotas() {
		switch qq.GetAcceleratorClass() {
		case class:
			return qq
		case validation.AnyClass:
			any = qq
		}
	}
	return any
}

// capOf is what a quota lets a queue hold: nominal plus borrow limit, and
// whether that is bounded (an unset borrow limit is unlimited).
func capOf(qq *meridianv1.QueueQuota) (int64, bool) {
	if qq.BorrowLimitMilli == nil {
		return 0, false
	}
	return qq.GetNominalMilliGpus() + qq.GetBorrowLimitMilli(), true
}

// borrowAboveParent checks each quota of child against its parent's quota
// for the same class (or the parent's "*"): the child's nominal plus its
// borrow limit must not exceed the parent's nominal plus the parent's
// borrow limit, and the child's nominal alone must fit too. A parent with
// no quota for the class, or with an unlimited borrow limit, bounds
// nothing (docs/design/quota-and-fairshare.md: it is transparent).
func borrowAboveParent(child, parent *meridianv1.Queue) []borrowViolation {
	var out []borrowViolation
	for _, qq := range child.GetQuotas() {
		class := qq.GetAcceleratorClass()
		pq := quotaFor(parent, class)
		if pq == nil {
			continue
		}
		pcap, bounded := capOf(pq)
		if !bounded {
			continue
		}
		pdesc := fmt.Sprintf("its parent %s may hold at most %s GPUs of %s (nominal %s + borrow_limit %s)", parent.GetPath(),
			quantity.Format(pcap), class, quantity.Format(pq.GetNominalMilliGpus()), quantity.Format(pq.GetBorrowLimitMilli()))
		ccap, cbounded := capOf(qq)
		switch {
		case qq.GetNominalMilliGpus() > pcap:
			out = append(out, borrowViolation{class, "nominal", fmt.Sprintf("quotas[%q].nominal is %s GPUs but %s.",
				class, quantity.Format(qq.GetNominalMilliGpus()), pdesc)})
		case cbounded && ccap > pcap:
			out = append(out, borrowViolation{class, "borrow_limit", fmt.Sprintf("quotas[%q] lets the queue borrow up to %s GPUs (nominal %s + borrow_limit %s) but %s. Lower borrow_limit to at most %s.",
				class, quantity.Format(ccap), quantity.Format(qq.GetNominalMilliGpus()), quantity.Format(qq.GetBorrowLimitMilli()), pdesc,
				quantity.Format(pcap-qq.GetNominalMilliGpus()))})
		}
	}
	return out
}

// classSet is the accelerator classes the hub knows.
type classSet struct {
	names []string // sorted
}

func (c classSet) has(name string) bool {
	_, ok := slices.BinarySearch(c.names, name)
	return ok
}

// suggest returns ` (did you mean "x"?)` for the closest known class, or "".
func (c classSet) suggest(name string) string {
	best, bestD := "", 0
	for _, n := range c.names {
		d := editdist.Distance(name, n)
		if best == "" || d < bestD {
			best, bestD = n, d
		}
	}
	if best != "" && bestD <= max(2, len(name)/4) {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}

// knownClasses asks the hub which accelerator classes exist
// (ListAcceleratorClasses: those the fleet advertises, those queues hold
// quotas for, and those its configuration weights). A hub from before that
// call answers Unimplemented; then the provider gathers the first two
// itself.
func knownClasses(ctx context.Context, hub *hubClient) (classSet, error) {
	classes, err := listClasses(ctx, hub)
	if err != nil {
		return classSet{}, err
	}
	var names []string
	for _, c := range classes {
		names = append(names, c.GetName())
	}
	slices.Sort(names)
	return classSet{names: names}, nil
}

// listClasses is ListAcceleratorClasses, or its equivalent from
// ListClusters and ListQueues on a hub without it.
func listClasses(ctx context.Context, hub *hubClient) ([]*meridianv1.AcceleratorClass, error) {
	resp, err := hub.clusters.ListAcceleratorClasses(ctx, &meridianv1.ListAcceleratorClassesRequest{})
	if status.Code(err) != codes.Unimplemented {
		return resp.GetClasses(), err
	}
	cl, err := hub.clusters.ListClusters(ctx, &meridianv1.ListClustersRequest{})
	if err != nil {
		return nil, err
	}
	by := map[string]*meridianv1.AcceleratorClass{}
	for _, t := range classTotals(cl.GetClusters()) {
		by[t.name] = &meridianv1.AcceleratorClass{Name: t.name, Clusters: t.clusters, TotalMilli: t.total, FreeMilli: t.free, Nodes: int32(t.nodes)}
	}
	tok := ""
	for {
		resp, err := hub.queues.ListQueues(ctx, &meridianv1.ListQueuesRequest{PageSize: 1000, PageToken: tok})
		if err != nil {
			return nil, err
		}
		for _, q := range resp.GetQueues() {
			for _, qq := range q.GetQuotas() {
				n := qq.GetAcceleratorClass()
				if n == "" || n == validation.AnyClass {
					continue
				}
				if by[n] == nil {
					by[n] = &meridianv1.AcceleratorClass{Name: n}
				}
				by[n].InQuotas = true
			}
		}
		if tok = resp.GetNextPageToken(); tok == "" {
			break
		}
	}
	var out []*meridianv1.AcceleratorClass
	for _, c := range by {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *meridianv1.AcceleratorClass) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, nil
}
