package records

import (
	"errors"
	"time"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// WorkloadSummary is the part of a stored workload that the hub's
// background passes look at for every stored record: who it is, where it
// belongs and whether (and since when) it is finished. Reading it scans
// the record's bytes without building the message, which costs a small
// fraction of a full decode and allocates only the strings kept.
type WorkloadSummary struct {
	ID             string
	Queue          string
	IdempotencyKey string
	Phase          meridianv1.WorkloadPhase
	// PendingCode is the status's pending_reason_code: why a queued
	// workload waits, as the last cycle that told it wrote it.
	PendingCode string
	// End is when the workload finished: its end_time, else its last
	// update, else its creation; the zero time when none is set (the rule
	// of retention.EndTime).
	End time.Time
}

// Field numbers of the stored workload that SummarizeWorkload reads
// (proto/meridian/v1/workload.proto). A test checks them against the
// generated descriptors.
const (
	fieldWorkloadID          = 1
	fieldWorkloadQueue       = 3
	fieldWorkloadIdemKey     = 11
	fieldWorkloadCreateTime  = 12
	fieldWorkloadStatus      = 13
	fieldStatusPhase         = 1
	fieldStatusEndTime       = 9
	fieldStatusUpdateTime    = 12
	fieldStatusPendingCode   = 13
	fieldTimestampSeconds    = 1
	fieldTimestampNanos      = 2
	minValidTimestampSeconds = -62135596800 // 0001-01-01T00:00:00Z
	maxValidTimestampSeconds = 253402300799 // 9999-12-31T23:59:59Z
)

// errSummary marks a record whose bytes are not a well-formed workload.
var errSummary = errors.New("records: summarize workload")

// stamp is a Timestamp as the wire builds it: set once any occurrence of
// the field was seen, fields merged occurrence by occurrence as
// proto.Unmarshal merges them.
type stamp struct {
	set     bool
	seconds int64
	nanos   int32
}

func (s stamp) time() (time.Time, bool) {
	if !s.set || s.seconds < minValidTimestampSeconds || s.seconds > maxValidTimestampSeconds || s.nanos < 0 || s.nanos >= 1e9 {
		return time.Time{}, false
	}
	if s.seconds == 0 && s.nanos == 0 {
		return time.Time{}, false
	}
	return time.Unix(s.seconds, int64(s.nanos)).UTC(), true
}

// SummarizeWorkload reads a stored workload's summary. For every
// record that DecodeWorkloadRecord accepts it returns what the decoded
// message says (FuzzSummarizeWorkload checks this); it does not
// validate the fields it skips, so it may accept some records that a full
// decode refuses.
func SummarizeWorkload(b []byte) (WorkloadSummary, error) { return summarize(b, false) }

// SummarizeWorkloadShared is SummarizeWorkload without a copy: the
// summary's strings share b's bytes, so they stay right only while b does
// not change, and a caller that keeps one longer than it uses b must copy
// it (strings.Clone). It is for readers of the watch cache's values, which
// never change: the Watch filter and the scheduling loop read a summary
// of every change of every workload, and the copies of its id and queue
// were garbage a moment later, a few million a minute at 2,000
// workloads/s.
func SummarizeWorkloadShared(b []byte) (WorkloadSummary, error) { return summarize(b, true) }

// summarize reads b's summary, its strings sharing b's bytes when shared.
func summarize(b []byte, shared bool) (WorkloadSummary, error) {
	var (
		out                  WorkloadSummary
		create, end, updated stamp
	)
	str := func(v []byte) string {
		if shared {
			return unsafe.String(unsafe.SliceData(v), len(v))
		}
		return string(v)
	}
	err := scanFields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == fieldWorkloadID && typ == protowire.BytesType:
			out.ID = str(v)
		case num == fieldWorkloadQueue && typ == protowire.BytesType:
			out.Queue = str(v)
		case num == fieldWorkloadIdemKey && typ == protowire.BytesType:
			out.IdempotencyKey = str(v)
		case num == fieldWorkloadCreateTime && typ == protowire.BytesType:
			return create.merge(v)
		case num == fieldWorkloadStatus && typ == protowire.BytesType:
			return scanFields(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
				switch {
				case num == fieldStatusPhase && typ == protowire.VarintType:
					out.Phase = meridianv1.WorkloadPhase(int32(x))
				case num == fieldStatusEndTime && typ == protowire.BytesType:
					return end.merge(v)
				case num == fieldStatusUpdateTime && typ == protowire.BytesType:
					return updated.merge(v)
				case num == fieldStatusPendingCode && typ == protowire.BytesType:
					out.PendingCode = str(v)
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return WorkloadSummary{}, err
	}
	for _, s := range []stamp{end, updated, create} {
		if t, ok := s.time(); ok {
			out.End = t
			break
		}
	}
	return out, nil
}

func (s *stamp) merge(b []byte) error {
	s.set = true
	return scanFields(b, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) error {
		switch {
		case num == fieldTimestampSeconds && typ == protowire.VarintType:
			s.seconds = int64(x)
		case num == fieldTimestampNanos && typ == protowire.VarintType:
			s.nanos = int32(x)
		}
		return nil
	})
}

// scanFields calls fn for every field of one message's encoding, with
// the field's bytes (length-delimited fields) or value (varints and
// fixed-width fields), and fails on malformed input. It reads each field
// as eachField (view.go) cuts it.
func scanFields(b []byte, fn func(protowire.Number, protowire.Type, []byte, uint64) error) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, _, body []byte) error {
		var (
			v []byte
			x uint64
		)
		switch typ {
		case protowire.VarintType:
			x, _ = protowire.ConsumeVarint(body)
		case protowire.Fixed32Type:
			f, _ := protowire.ConsumeFixed32(body)
			x = uint64(f)
		case protowire.Fixed64Type:
			x, _ = protowire.ConsumeFixed64(body)
		case protowire.BytesType:
			v, _ = protowire.ConsumeBytes(body)
		}
		return fn(num, typ, v, x)
	})
}
