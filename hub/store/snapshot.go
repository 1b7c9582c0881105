package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strings"
)

// A cache snapshot is a file a Cache writes now and then (see
// CacheOptions.SnapshotFile) so that, after a restart, it can start from
// the items it held instead of reading every value from etcd again. The
// file is only ever a hint: every item it holds is checked against etcd
// before it is used (warm.go), so a stale, torn or foreign file costs a
// full list, never a wrong cache.
//
// Layout, integers as Go's binary varints:
//
//	magic "meridian-cache-snapshot-v2\n"
//	uvarint len, prefix | uvarint etcd cluster id | varint revision (the
//	  items are the prefix exactly as of this revision) | uvarint entry
//	  count | uvarint changes, uvarint revisions (the cache's recent
//	  churn: that many changes under the prefix in that many etcd
//	  revisions; 0, 0 when unknown)
//	entries, in key order: uvarint len, key | varint mod rev |
//	  varint create rev | uvarint len, value
//	uvarint 0 (no key is empty) | uvarint entry count
//	4 bytes: CRC-32C of everything before, little-endian
//
// The header's count and churn are what a restart weighs before it
// replays the changes since the file (warm.go, longReplay): how many keys
// the file holds, and how many changes the revisions since it probably
// brought. Version 1 files (no count, no churn) are refused like any
// foreign file: one full list.
const snapshotMagic = "meridian-cache-snapshot-v2\n"

// maxSnapshotBytes bounds a snapshot file read at start (etcd's own
// largest database is 8 GiB).
const maxSnapshotBytes = 8 << 30

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// snapshotHeader is what a snapshot file says before its entries.
type snapshotHeader struct {
	prefix    string
	clusterID uint64
	rev       int64
	keys      uint64 // entries that follow
	churn     churn  // the cache's recent changes per revision
}

// churn is a rate of changes per etcd revision, kept as the two counts it
// was measured from; revs 0 means unknown.
type churn struct{ changes, revs uint64 }

// changesIn estimates the changes in revs revisions at this rate; ok is
// false when the rate is unknown.
func (c churn) changesIn(revs uint64) (n uint64, ok bool) {
	if c.revs == 0 {
		return 0, false
	}
	// In floating point: the product of two counts may not fit 64 bits.
	return uint64(min(float64(revs)*float64(c.changes)/float64(c.revs), 1<<62)), true
}

// snapshot is a decoded snapshot file.
type snapshot struct {
	snapshotHeader
	items []Item // in key order
}

// snapshotWriter encodes a snapshot onto w as its items come.
type snapshotWriter struct {
	bw   *bufio.Writer
	crc  hashWriter
	out  io.Writer
	want uint64 // entries the header promised
	n    uint64
	buf  []byte
}

type hashWriter struct{ sum uint32 }

func (h *hashWriter) Write(p []byte) (int, error) {
	h.sum = crc32.Update(h.sum, castagnoli, p)
	return len(p), nil
}

func newSnapshotWriter(out io.Writer, h snapshotHeader) *snapshotWriter {
	s := &snapshotWriter{out: out, want: h.keys}
	s.bw = bufio.NewWriterSize(io.MultiWriter(&s.crc, out), 1<<20)
	b := []byte(snapshotMagic)
	b = binary.AppendUvarint(b, uint64(len(h.prefix)))
	b = append(b, h.prefix...)
	b = binary.AppendUvarint(b, h.clusterID)
	b = binary.AppendVarint(b, h.rev)
	b = binary.AppendUvarint(b, h.keys)
	b = binary.AppendUvarint(b, h.churn.changes)
	b = binary.AppendUvarint(b, h.churn.revs)
	_, _ = s.bw.Write(b) // a write error stays in bw and comes back from close
	return s
}

func (s *snapshotWriter) add(it Item) {
	b := s.buf[:0]
	b = binary.AppendUvarint(b, uint64(len(it.Key)))
	b = append(b, it.Key...)
	b = binary.AppendVarint(b, it.ModRev)
	b = binary.AppendVarint(b, it.CreateRev)
	b = binary.AppendUvarint(b, uint64(len(it.Value)))
	_, _ = s.bw.Write(b)
	_, _ = s.bw.Write(it.Value)
	s.buf = b
	s.n++
}

// close writes the trailer and flushes; it returns the first write error.
func (s *snapshotWriter) close() error {
	if s.n != s.want {
		return fmt.Errorf("wrote %d entries, the header says %d", s.n, s.want)
	}
	b := binary.AppendUvarint(s.buf[:0], 0)
	b = binary.AppendUvarint(b, s.n)
	_, _ = s.bw.Write(b)
	if err := s.bw.Flush(); err != nil {
		return err
	}
	_, err := s.out.Write(binary.LittleEndian.AppendUint32(nil, s.crc.sum))
	return err
}

// decodeSnapshot parses a snapshot file. Every error says what is wrong
// and where; nothing in data is trusted before its checksum matches.
func decodeSnapshot(data []byte) (*snapshot, error) {
	if len(data) < len(snapshotMagic)+4 || string(data[:len(snapshotMagic)]) != snapshotMagic {
		return nil, errors.New("not a cache snapshot of this version (bad magic)")
	}
	body, tail := data[:len(data)-4], data[len(data)-4:]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(tail); got != want {
		return nil, fmt.Errorf("checksum %08x, file says %08x: torn or changed", got, want)
	}
	r := snapReader{b: body[len(snapshotMagic):]}
	s := &snapshot{snapshotHeader: snapshotHeader{prefix: string(r.bytes("prefix")), clusterID: r.uvarint("cluster id"), rev: r.varint("revision"),
		keys: r.uvarint("entry count"), churn: churn{changes: r.uvarint("churn changes"), revs: r.uvarint("churn revisions")}}}
	if r.err != nil {
		return nil, fmt.Errorf("header: %w", r.err)
	}
	if s.prefix == "" {
		return nil, errors.New("the prefix is empty")
	}
	// Every entry takes at least five bytes: no count can make this
	// allocate more than the file.
	s.items = make([]Item, 0, min(s.keys, uint64(len(r.b)/5)))
	for r.err == nil {
		key := r.bytes("key")
		if r.err != nil || len(key) == 0 {
			break
		}
		it := Item{Key: string(key), ModRev: r.varint("mod revision"), CreateRev: r.varint("create revision")}
		// The values stay in the file's buffer (no copy; the cache never
		// changes a value): one allocation the collector need not scan.
		v := r.bytes("value")
		it.Value = v[:len(v):len(v)]
		if r.err != nil {
			break
		}
		if n := len(s.items); n > 0 && s.items[n-1].Key >= it.Key {
			return nil, fmt.Errorf("entry %d: key %q not after %q", n, clipKey(it.Key), clipKey(s.items[n-1].Key))
		}
		if !strings.HasPrefix(it.Key, s.prefix) || it.ModRev <= 0 || it.CreateRev <= 0 || it.CreateRev > it.ModRev {
			return nil, fmt.Errorf("entry %d: key %q with revisions %d/%d is not an item under %q", len(s.items), clipKey(it.Key), it.CreateRev, it.ModRev, s.prefix)
		}
		s.items = append(s.items, it)
	}
	count := r.uvarint("entry count")
	if r.err != nil {
		return nil, fmt.Errorf("entry %d: %w", len(s.items), r.err)
	}
	if count != uint64(len(s.items)) || count != s.keys || len(r.b) != 0 {
		return nil, fmt.Errorf("%d entries, trailer says %d and header %d (%d bytes left over)", len(s.items), count, s.keys, len(r.b))
	}
	return s, nil
}

// snapReader consumes varints and length-prefixed bytes; the first
// problem sticks in err.
type snapReader struct {
	b   []byte
	err error
}

func (r *snapReader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("%s: truncated or overlong varint", what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// varint reads binary.AppendVarint's zig-zag encoding.
func (r *snapReader) varint(what string) int64 {
	u := r.uvarint(what)
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return x
}

func (r *snapReader) bytes(what string) []byte {
	n := r.uvarint(what + " length")
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = fmt.Errorf("%s: %d bytes, %d left", what, n, len(r.b))
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func clipKey(k string) string {
	if len(k) > 80 {
		return k[:80] + "..."
	}
	return k
}

// readSnapshot reads and decodes the snapshot at path.
func readSnapshot(path string) (*snapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > maxSnapshotBytes {
		return nil, fmt.Errorf("%s is %d bytes, more than %d", path, st.Size(), maxSnapshotBytes)
	}
	data := make([]byte, st.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, err
	}
	s, err := decodeSnapshot(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}
