package api

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"time"
)

// WorkloadIDPrefix starts every workload id.
const WorkloadIDPrefix = "wl-"

// crockford is the Crockford base32 alphabet used by ULIDs.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// idGen makes ULIDs (48-bit millisecond time, 80 random bits) that are
// strictly increasing within one process, so workload keys sort by age.
type idGen struct {
	mu      sync.Mutex
	lastMs  uint64
	lastHi  uint16
	lastLo  uint64
	hasLast bool
}

func newIDGen() *idGen { return &idGen{} }

// next returns a new id for time t.
func (g *idGen) next(t time.Time) (string, error) {
	ms := uint64(t.UnixMilli())
	g.mu.Lock()
	defer g.mu.Unlock()
	var hi uint16
	var lo uint64
	if g.hasLast && ms <= g.lastMs {
		// Same (or an earlier) millisecond: increment the random part so
		// ids stay ordered.
		ms = g.lastMs
		hi, lo = g.lastHi, g.lastLo+1
		if lo == 0 {
			hi++
			if hi == 0 {
				return "", fmt.Errorf("api: id space exhausted in millisecond %d", ms)
			}
		}
	} else {
		var b [10]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("api: read random id bits: %w", err)
		}
		hi = binary.BigEndian.Uint16(b[:2])
		lo = binary.BigEndian.Uint64(b[2:])
	}
	g.lastMs, g.lastHi, g.lastLo, g.hasLast = ms, hi, lo, true
	return WorkloadIDPrefix + encodeULID(ms, hi, lo), nil
}

// encodeULID writes 128 bits (48 time, 16+64 random) as 26 base32 digits.
func encodeULID(ms uint64, hi uint16, lo uint64) string {
	// 128-bit big-endian value: ms(48) | hi(16) | lo(64).
	var v [16]byte
	for i := 0; i < 6; i++ {
		v[i] = byte(ms >> (40 - 8*i))
	}
	binary.BigEndian.PutUint16(v[6:8], hi)
	binary.BigEndian.PutUint64(v[8:], lo)
	// 26 digits × 5 bits = 130 bits: two leading zero bits, then v.
	var out [26]byte
	for i := range out {
		var x byte
		for b := 0; b < 5; b++ {
			x = x<<1 | bitAt(v, 5*i+b-2)
		}
		out[i] = crockford[x]
	}
	return string(out[:])
}

func bitAt(v [16]byte, i int) byte {
	if i < 0 || i >= 128 {
		return 0
	}
	return (v[i/8] >> (7 - i%8)) & 1
}

// validWorkloadID reports whether id looks like one this package made.
func validWorkloadID(id string) bool {
	rest, ok := strings.CutPrefix(id, WorkloadIDPrefix)
	if !ok || len(rest) != 26 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if !strings.ContainsRune(crockford, rune(rest[i])) {
			return false
		}
	}
	return true
}
