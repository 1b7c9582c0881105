package fifomap

import (
	"encoding/binary"
	"hash/maphash"
)

// chunkSize is the arena's unit: entries are appended to the newest chunk,
// and a chunk is released once every entry in it has been forgotten.
const chunkSize = 64 << 10

// Map is a FIFO-bounded map from string keys to byte values. The zero
// value is not usable; call New. It is not safe for concurrent use.
type Map struct {
	seed  maphash.Seed
	limit int
	index map[uint64]uint64 // key hash -> sequence number of its newest entry
	// ring holds the entries oldest first from ring[first], wrapping: the
	// entry with sequence number seq is the (seq-head)th. A ring, not a
	// slice that drops its front, so that a full map's puts reuse the
	// slots evictions free instead of copying every slot into a new array
	// each time the old one's end is reached.
	ring  []slot
	first int    // index in ring of the oldest entry
	n     int    // entries held
	head  uint64 // sequence number of the oldest entry

	chunks    [][]byte // arena, oldest first
	chunkBase uint64   // chunk number of chunks[0]
}

// slot locates one entry: key then value, in chunk number chunk.
type slot struct {
	hash        uint64
	chunk       uint64
	off, kn, vn uint32
}

// New is an empty map that holds at most limit entries (at least one).
func New(limit int) *Map {
	return &Map{seed: maphash.MakeSeed(), limit: max(limit, 1), index: map[uint64]uint64{}}
}

// Len is how many entries the map holds, counting a key put twice as two
// until the older is forgotten.
func (m *Map) Len() int { return m.n }

// Put records value under key, as the newest entry, forgetting the oldest
// entry once the map is full. The value is copied.
func (m *Map) Put(key string, value []byte) {
	if m.Len() == m.limit {
		m.evictOldest()
	}
	h := maphash.String(m.seed, key)
	chunk, off := m.reserve(len(key) + len(value))
	c := m.chunks[chunk-m.chunkBase]
	c = append(c, key...)
	c = append(c, value...)
	m.chunks[chunk-m.chunkBase] = c
	s := slot{hash: h, chunk: chunk, off: uint32(off), kn: uint32(len(key)), vn: uint32(len(value))}
	m.index[h] = m.head + uint64(m.n)
	m.push(s)
}

// push appends s as the newest entry, growing the ring (at most to the
// limit) when it is full.
func (m *Map) push(s slot) {
	if m.n == len(m.ring) {
		grown := make([]slot, min(max(2*len(m.ring), 64), m.limit))
		for i := range m.n {
			grown[i] = m.ring[m.at(i)]
		}
		m.ring, m.first = grown, 0
	}
	m.ring[m.at(m.n)] = s
	m.n++
}

// at is the index in ring of the i-th entry, oldest first.
func (m *Map) at(i int) int { return (m.first + i) % len(m.ring) }

// PutUint64 records v under key (for times and counters).
func (m *Map) PutUint64(key string, v uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	m.Put(key, b[:])
}

// Get is the newest value recorded under key. The slice stays valid and
// unchanged while the map lives; the caller must not modify it.
func (m *Map) Get(key string) ([]byte, bool) {
	seq, ok := m.index[maphash.String(m.seed, key)]
	if !ok {
		return nil, false
	}
	k, v := m.entry(m.slotOf(seq))
	if string(k) != key {
		return nil, false // another key with the same hash
	}
	return v, true
}

// Has reports whether key is held.
func (m *Map) Has(key string) bool {
	_, ok := m.Get(key)
	return ok
}

// Uint64 reads a value PutUint64 recorded (as Get or ForgetOldestWhile
// hand it out); false for a value of another length.
func Uint64(value []byte) (uint64, bool) {
	if len(value) != 8 {
		return 0, false
	}
	return binary.LittleEndian.Uint64(value), true
}

// ForgetOldestWhile forgets entries, oldest first, while forget returns
// true for the oldest one's value; it returns how many it forgot. It
// suits values put in time order, e.g. forgetting those recorded before a
// cut-off.
func (m *Map) ForgetOldestWhile(forget func(value []byte) bool) int {
	n := 0
	for m.Len() > 0 {
		_, v := m.entry(m.slotOf(m.head))
		if !forget(v) {
			break
		}
		m.evictOldest()
		n++
	}
	return n
}

func (m *Map) slotOf(seq uint64) slot { return m.ring[m.at(int(seq-m.head))] }

func (m *Map) entry(s slot) (key, value []byte) {
	c := m.chunks[s.chunk-m.chunkBase]
	end := s.off + s.kn
	return c[s.off:end], c[end : end+s.vn : end+s.vn]
}

// evictOldest forgets the oldest entry, and the chunks nothing held
// points into any more.
func (m *Map) evictOldest() {
	s := m.ring[m.first]
	if m.index[s.hash] == m.head {
		delete(m.index, s.hash)
	}
	m.first = m.at(1)
	m.n--
	m.head++
	keepFrom := m.chunkBase + uint64(len(m.chunks)) - 1 // the newest chunk stays
	if m.Len() > 0 {
		keepFrom = m.ring[m.first].chunk
	}
	for m.chunkBase < keepFrom {
		m.chunks[0] = nil
		m.chunks = m.chunks[1:]
		m.chunkBase++
	}
}

// reserve is where n more bytes go: the newest chunk when they fit,
// else a new one (as large as n when n is larger than a chunk).
func (m *Map) reserve(n int) (chunk uint64, off int) {
	if len(m.chunks) > 0 {
		last := m.chunks[len(m.chunks)-1]
		if cap(last)-len(last) >= n {
			return m.chunkBase + uint64(len(m.chunks)) - 1, len(last)
		}
	}
	m.chunks = append(m.chunks, make([]byte, 0, max(chunkSize, n)))
	return m.chunkBase + uint64(len(m.chunks)) - 1, 0
}

// Range calls f with every key held and its newest value, oldest first,
// until f returns false. The value is valid as Get's is.
func (m *Map) Range(f func(key string, value []byte) bool) {
	for i := range m.n {
		s := m.ring[m.at(i)]
		if m.index[s.hash] != m.head+uint64(i) {
			continue // put again later, or its hash taken by a newer key
		}
		k, v := m.entry(s)
		if !f(string(k), v) {
			return
		}
	}
}
