package audit

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meridian-gpu/meridian/internal/protofast"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// The etcd log keeps events in pages, not one key per event: every
// mutating request is audited, so at thousands of submits a second a key
// per event was a fifth of the hub's etcd key writes, and as many deletes
// again when pruned. A page is one etcd key:
//
//	PagePrefix + <newest event id> + "/" + <number of events>
//
// Its value is the events, oldest first, encoded as the repeated field 1
// of a protobuf message (what `message AuditEventPage { repeated
// AuditEvent events = 1; }` would be). Keys sort by their newest event,
// and no page spans more than pageSpan from its oldest event to its
// newest, so a reader looking for events before id X needs only the pages
// whose key is below X plus pageSpan (List).
const PagePrefix = "/meridian-audit/pages/"

// pageSpan bounds the time between a page's oldest and newest event; a
// batch that spans more (a recorder whose events carry old times) is cut
// into several pages.
const pageSpan = time.Second

// pageBytes bounds a page's encoded size, well under etcd's request limit.
const pageBytes = 256 << 10

// page is one page's events, sorted by id, and its encoding.
type page struct {
	events []*meridianv1.AuditEvent
	value  []byte
}

// key is the page's etcd key.
func (p *page) key() string {
	return PagePrefix + p.events[len(p.events)-1].GetId() + "/" + strconv.Itoa(len(p.events))
}

// paginate sorts events by id and cuts them into pages of at most
// pageSpan and pageBytes each.
func paginate(events []*meridianv1.AuditEvent) ([]page, error) {
	slices.SortFunc(events, func(a, b *meridianv1.AuditEvent) int { return strings.Compare(a.GetId(), b.GetId()) })
	var (
		pages []page
		cur   page
		first int64
	)
	for _, e := range events {
		b, err := protofast.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("audit event %s: %w", e.GetId(), err)
		}
		ns := idNanos(e.GetId())
		size := protowire.SizeTag(1) + protowire.SizeBytes(len(b))
		if len(cur.events) > 0 && (ns-first > int64(pageSpan) || len(cur.value)+size > pageBytes) {
			pages = append(pages, cur)
			cur = page{}
		}
		if len(cur.events) == 0 {
			first = ns
		}
		cur.events = append(cur.events, e)
		cur.value = protowire.AppendBytes(protowire.AppendTag(cur.value, 1, protowire.BytesType), b)
	}
	if len(cur.events) > 0 {
		pages = append(pages, cur)
	}
	return pages, nil
}

// decodePage reads a page's events, oldest first.
func decodePage(value []byte) ([]*meridianv1.AuditEvent, error) {
	var out []*meridianv1.AuditEvent
	for len(value) > 0 {
		num, typ, n := protowire.ConsumeTag(value)
		if n < 0 {
			return out, protowire.ParseError(n)
		}
		value = value[n:]
		if num != 1 || typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, value)
			if n < 0 {
				return out, protowire.ParseError(n)
			}
			value = value[n:]
			continue // a field a later version added
		}
		b, n := protowire.ConsumeBytes(value)
		if n < 0 {
			return out, protowire.ParseError(n)
		}
		value = value[n:]
		e := &meridianv1.AuditEvent{}
		if err := protofast.Unmarshal(b, e); err != nil {
			return out, err
		}
		out = append(out, e)
	}
	return out, nil
}

// errBadPageKey is pageKey's error for a key this package did not write.
var errBadPageKey = errors.New("audit: not a page key")

// pageKey splits a page's key into its newest event id and its count.
func pageKey(key string) (newest string, count int, err error) {
	rest, ok := strings.CutPrefix(key, PagePrefix)
	if !ok {
		return "", 0, errBadPageKey
	}
	newest, n, ok := strings.Cut(rest, "/")
	if !ok || !validID(newest) {
		return "", 0, errBadPageKey
	}
	count, err = strconv.Atoi(n)
	if err != nil || count <= 0 {
		return "", 0, errBadPageKey
	}
	return newest, count, nil
}

// idNanos is the Unix time in an id; 0 for one that has none.
func idNanos(id string) int64 {
	ns, _, _ := strings.Cut(id, "-")
	v, _ := strconv.ParseInt(ns, 10, 64)
	return v
}

// idFloor is the least id at time ns: a bound for key ranges.
func idFloor(ns int64) string { return fmt.Sprintf("%020d", max(ns, 0)) }
