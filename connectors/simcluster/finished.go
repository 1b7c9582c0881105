package simcluster

import (
	"encoding/binary"
	"errors"
	"time"

	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// encodeFinished is a finished status as the cluster keeps it, without its
// dispatch id (the key it is kept under): varints, then length-prefixed
// strings.
func encodeFinished(s agent.WorkStatus) []byte {
	b := make([]byte, 0, 64+len(s.WorkloadID)+len(s.Reason)+16*len(s.Nodes))
	b = binary.AppendUvarint(b, uint64(s.State))
	b = binary.AppendVarint(b, s.StartedAt.UnixNano())
	b = binary.AppendVarint(b, s.FinishedAt.UnixNano())
	b = binary.AppendVarint(b, s.GPUMilliSeconds)
	if s.ExitCode != nil {
		b = append(b, 1)
		b = binary.AppendVarint(b, int64(*s.ExitCode))
	} else {
		b = append(b, 0)
	}
	b = appendString(b, s.WorkloadID)
	b = appendString(b, s.Reason)
	b = binary.AppendUvarint(b, uint64(len(s.Nodes)))
	for _, n := range s.Nodes {
		b = appendString(b, n)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

var errShortRecord = errors.New("finished record cut short")

// decodeFinished reverses encodeFinished for dispatch id.
func decodeFinished(id string, b []byte) (agent.WorkStatus, error) {
	d := decoder{b: b}
	s := agent.WorkStatus{DispatchID: id, State: agent.WorkState(d.uvarint())}
	s.StartedAt = time.Unix(0, d.varint())
	s.FinishedAt = time.Unix(0, d.varint())
	s.GPUMilliSeconds = d.varint()
	if d.byte() == 1 {
		exit := int32(d.varint())
		s.ExitCode = &exit
	}
	s.WorkloadID = d.string()
	s.Reason = d.string()
	if n := d.uvarint(); n <= uint64(len(d.b)) { // each node takes a byte at least
		s.Nodes = make([]string, n)
		for i := range s.Nodes {
			s.Nodes[i] = d.string()
		}
	} else {
		d.bad = true
	}
	if d.bad || len(d.b) != 0 {
		return agent.WorkStatus{}, errShortRecord
	}
	return s, nil
}

// decoder reads what encodeFinished wrote; bad is set on the first read
// past the end, after which every read is zero.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.bad, d.b = true, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

// varint undoes binary.AppendVarint's zig-zag on a uvarint.
func (d *decoder) varint() int64 {
	u := d.uvarint()
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return x
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.bad = true
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) string() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.bad, d.b = true, nil
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
