package convert

import (
	"fmt"
	"sort"

	"github.com/meridian-gpu/meridian/hub/quota"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// QueueSpec turns a stored queue into the quota tree's spec. An omitted
// borrow or lend limit means unlimited; weight 0 means the default, 1.
func QueueSpec(q *meridianv1.Queue) (quota.QueueSpec, error) {
	if q == nil {
		return quota.QueueSpec{}, fmt.Errorf("queue: is nil")
	}
	if err := quota.ValidatePath(q.GetPath()); err != nil {
		return quota.QueueSpec{}, fmt.Errorf("path: %w", err)
	}
	if q.GetWeight() < 0 {
		return quota.QueueSpec{}, fmt.Errorf("weight: must not be negative, got %d", q.GetWeight())
	}
	s := quota.QueueSpec{Path: q.GetPath(), Weight: float64(q.GetWeight())}
	for i, qq := range q.GetQuotas() {
		cls := qq.GetAcceleratorClass()
		if cls == "" {
			cls = quota.AnyClass
		}
		if s.Limits == nil {
			s.Limits = map[string]quota.Limits{}
		}
		if _, dup := s.Limits[cls]; dup {
			return quota.QueueSpec{}, fmt.Errorf("quotas[%d].accelerator_class: %q is listed twice", i, cls)
		}
		l := quota.Limits{Nominal: qq.GetNominalMilliGpus(), BorrowLimit: quota.Unlimited, LendLimit: quota.Unlimited}
		if qq.BorrowLimitMilli != nil {
			l.BorrowLimit = qq.GetBorrowLimitMilli()
		}
		if qq.LendLimitMilli != nil {
			l.LendLimit = qq.GetLendLimitMilli()
		}
		s.Limits[cls] = l
	}
	return s, nil
}

// QueueTree builds the quota tree from stored queues, sorted by path. A
// queue that does not convert is skipped and reported in bad (path: error),
// so one broken record cannot stop scheduling for everyone else.
func QueueTree(qs []*meridianv1.Queue) (*quota.Tree, []string, error) {
	var specs []quota.QueueSpec
	var bad []string
	for _, q := range qs {
		s, err := QueueSpec(q)
		if err != nil {
			bad = append(bad, fmt.Sprintf("queue %q: %v", q.GetPath(), err))
			continue
		}
		specs = append(specs, s)
	}
	sort.Slice(specs, func(a, b int) bool { return specs[a].Path < specs[b].Path })
	t, err := quota.NewTree(specs)
	if err != nil {
		return nil, bad, fmt.Errorf("queue tree: %w", err)
	}
	return t, bad, nil
}
