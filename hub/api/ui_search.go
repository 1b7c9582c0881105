package api

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/meridian-gpu/meridian/hub/api/validation"
	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// This file serves SearchWorkloads, the ops dashboard's workload table
// (hub/ui): ListWorkloads' filters plus free text, and counts per phase and
// per queue over every matching workload. Counting needs one pass over
// every stored workload; decoding 100,000 records on each search would
// cost most of a second, so each watch cache keeps a summary per record
// (the few fields the filters read), decoded once per mod revision.
// BenchmarkSearchWorkloads measures it at 100,000 stored workloads.

const maxSearchText = 128

// wlSummary is what the search filters read of one stored workload.
type wlSummary struct {
	modRev  int64
	gen     uint64 // the full scan that last saw it, for pruning
	id      string
	name    string // lower case
	queue   string
	cluster string
	phase   meridianv1.WorkloadPhase
	labels  map[string]string
}

// summaryIndex holds the summaries of one watch cache's workloads.
type summaryIndex struct {
	mu  sync.Mutex
	gen uint64
	m   map[string]*wlSummary
}

// summaryIndexes maps a *store.Cache to its *summaryIndex. The index lives
// as long as the process; a hub has one cache.
var summaryIndexes sync.Map

func summariesFor(c *store.Cache) *summaryIndex {
	if c == nil {
		return nil
	}
	if v, ok := summaryIndexes.Load(c); ok {
		return v.(*summaryIndex)
	}
	v, _ := summaryIndexes.LoadOrStore(c, &summaryIndex{m: map[string]*wlSummary{}})
	return v.(*summaryIndex)
}

func summarize(it store.Item, w *meridianv1.Workload) *wlSummary {
	return &wlSummary{
		modRev: it.ModRev, id: w.GetId(), name: strings.ToLower(w.GetName()),
		queue: w.GetQueue(), cluster: w.GetStatus().GetCluster(), phase: w.GetStatus().GetPhase(),
		labels: w.GetLabels(),
	}
}

// summary returns the item's summary, decoding the record only when the
// index has none for its mod revision. A nil index always decodes.
func (s *Service) summary(idx *summaryIndex, it store.Item, gen uint64) (*wlSummary, error) {
	if idx != nil {
		idx.mu.Lock()
		sm := idx.m[it.Key]
		if sm != nil && sm.modRev == it.ModRev {
			if gen != 0 {
				sm.gen = gen
			}
			idx.mu.Unlock()
			return sm, nil
		}
		idx.mu.Unlock()
	}
	w, err := DecodeWorkloadRecord(it.Value)
	if err != nil {
		return nil, err
	}
	sm := summarize(it, w)
	if idx != nil {
		sm.gen = gen
		idx.mu.Lock()
		idx.m[it.Key] = sm
		idx.mu.Unlock()
	}
	return sm, nil
}

// prune drops the summaries a full scan of generation gen did not see.
func (idx *summaryIndex) prune(gen uint64) {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	for k, sm := range idx.m {
		if sm.gen != gen {
			delete(idx.m, k)
		}
	}
}

// SearchWorkloads lists a page of the workloads that match, newest first,
// and with include_counts counts all of them by phase and queue.
func (s *Service) SearchWorkloads(ctx context.Context, req *meridianv1.SearchWorkloadsRequest) (*meridianv1.SearchWorkloadsResponse, error) {
	size, err := pageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	if q := req.GetQueue(); q != "" {
		if err := validation.CheckQueuePath(q); err != nil {
			return nil, invalid("queue", "%v", err)
		}
	}
	for i, p := range req.GetPhase() {
		if _, ok := meridianv1.WorkloadPhase_name[int32(p)]; !ok {
			return nil, invalid(fmt.Sprintf("phase[%d]", i), "unknown phase %d", p)
		}
	}
	if c := req.GetCluster(); len(c) > 253 {
		return nil, invalid("cluster", "is %d characters; at most 253", len(c))
	}
	if t := req.GetText(); len(t) > maxSearchText {
		return nil, invalid("text", "is %d characters; at most %d", len(t), maxSearchText)
	}
	sel, err := parseSelector(req.GetLabelSelector())
	if err != nil {
		return nil, invalid("label_selector", "%v", err)
	}
	phases := make([]string, 0, len(req.GetPhase()))
	for _, p := range req.GetPhase() {
		phases = append(phases, p.String())
	}
	slices.Sort(phases)
	text := strings.ToLower(strings.TrimSpace(req.GetText()))
	fh := filterHash("search", req.GetQueue(), strings.Join(phases, ","), req.GetCluster(), req.GetLabelSelector(), text)
	prefix := store.Prefix(store.KindWorkloads)
	below := ""
	if tok := req.GetPageToken(); tok != "" {
		t, err := decodeToken(tok, fh)
		if err != nil {
			return nil, err
		}
		if !validWorkloadID(t.Last) {
			return nil, invalid("page_token", "is not a token this server issued (bad position)")
		}
		below = prefix + t.Last
	}

	visible := map[string]bool{} // per queue, for this caller
	match := func(sm *wlSummary) bool {
		if !queueMatches(req.GetQueue(), sm.queue) {
			return false
		}
		v, ok := visible[sm.queue]
		if !ok {
			v = canView(ctx, sm.queue)
			visible[sm.queue] = v
		}
		if !v {
			return false
		}
		if len(req.GetPhase()) > 0 && !slices.Contains(req.GetPhase(), sm.phase) {
			return false
		}
		if c := req.GetCluster(); c != "" && sm.cluster != c {
			return false
		}
		if text != "" && !strings.Contains(strings.ToLower(sm.id), text) && !strings.Contains(sm.name, text) {
			return false
		}
		return sel.matches(sm.labels)
	}

	next := s.etcdBatches(ctx, prefix)
	var idx *summaryIndex
	if s.d.Workloads != nil {
		if next, err = s.cacheBatches(ctx, prefix); err != nil {
			return nil, err
		}
		idx = summariesFor(s.d.Workloads)
	}
	out := &meridianv1.SearchWorkloadsResponse{}
	if s.d.Workloads != nil {
		out.Revision = s.d.Workloads.Rev()
	}
	counts := req.GetIncludeCounts()
	var gen uint64
	if counts && idx != nil {
		idx.mu.Lock()
		idx.gen++
		gen = idx.gen
		idx.mu.Unlock()
	}
	byPhase := map[meridianv1.WorkloadPhase]int64{}
	byQueue := map[string]int64{}
	// With counts the scan starts at the newest workload and visits all;
	// the page holds the matches below the token. Without counts it starts
	// at the token and stops once the page is full.
	from := below
	if counts {
		from = ""
	}
	pageBytes, scanned, full := 0, 0, false
	lastKey := ""
	for {
		batch, more, err := next(from)
		if err != nil {
			return nil, err
		}
		for i, it := range batch {
			scanned++
			sm, err := s.summary(idx, it, gen)
			if err != nil {
				s.log.Error("skipping undecodable workload record", "key", it.Key, "err", err)
				continue
			}
			if !match(sm) {
				continue
			}
			if counts {
				out.Total++
				byPhase[sm.phase]++
				byQueue[sm.queue]++
			}
			if below != "" && it.Key >= below {
				continue // above the page (counted only)
			}
			if full {
				if out.NextPageToken == "" {
					out.NextPageToken = encodeToken(pageToken{Last: strings.TrimPrefix(lastKey, prefix), Filter: fh})
				}
				if !counts {
					return out, nil
				}
				continue
			}
			w, err := DecodeWorkloadRecord(it.Value)
			if err != nil {
				continue
			}
			out.Workloads = append(out.Workloads, w)
			pageBytes += len(it.Value)
			lastKey = it.Key
			full = len(out.Workloads) == size || pageBytes >= maxPageBytes
			if !counts && !full && scanned >= maxScanPerList && (i < len(batch)-1 || more) {
				// Without counts a sparse filter stops after a bounded scan,
				// as ListWorkloads does; the token resumes from here.
				out.NextPageToken = encodeToken(pageToken{Last: strings.TrimPrefix(it.Key, prefix), Filter: fh})
				return out, nil
			}
		}
		if !more || len(batch) == 0 {
			break
		}
		from = batch[len(batch)-1].Key
	}
	if counts {
		if idx != nil {
			idx.prune(gen)
		}
		ps := make([]meridianv1.WorkloadPhase, 0, len(byPhase))
		for p := range byPhase {
			ps = append(ps, p)
		}
		slices.Sort(ps)
		for _, p := range ps {
			out.PhaseCounts = append(out.PhaseCounts, &meridianv1.WorkloadCount{Key: p.String(), Count: byPhase[p]})
		}
		qs := make([]string, 0, len(byQueue))
		for q := range byQueue {
			qs = append(qs, q)
		}
		sort.Strings(qs)
		for _, q := range qs {
			out.QueueCounts = append(out.QueueCounts, &meridianv1.WorkloadCount{Key: q, Count: byQueue[q]})
		}
	}
	return out, nil
}
