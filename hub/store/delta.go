package store

import "maps"

// journalCap bounds the change journal; a reader further behind than this
// gets a full snapshot instead of a delta.
const journalCap = 1 << 16

// journal records which keys changed, in order. Position p means "after
// the p-th change"; entries before base have been dropped.
type journal struct {
	base uint64   // position of keys[0]
	keys []string // keys[i] changed at position base+i+1
}

func (c *Cache) journalLocked(key string) {
	j := &c.journal
	if len(j.keys) >= journalCap {
		// Drop the older half; copying keeps the backing array bounded.
		half := len(j.keys) / 2
		j.keys = append(j.keys[:0:0], j.keys[half:]...)
		j.base += uint64(half)
	}
	j.keys = append(j.keys, key)
}

// end is the position after the last change.
func (j *journal) end() uint64 { return j.base + uint64(len(j.keys)) }

// Delta is what changed in a Cache since an earlier position.
type Delta struct {
	// Full is true when the changes since the position asked for are no
	// longer known (or the position was 0): Items then holds every key,
	// and the reader must drop what it had.
	Full bool
	// Items holds the current item of every key that changed (or of every
	// key, when Full). A changed key missing from Items was deleted; it is
	// listed in Deleted.
	Items   map[string]Item
	Deleted []string
	// Rev is the revision the result reflects; Pos is the position to ask
	// for next time.
	Rev int64
	Pos uint64
}

// Delta returns the changes since pos (0: everything). Readers that keep
// their own decoded copy of the cache use it to apply only what changed
// instead of re-reading every key each time. Values are shared with the
// cache: treat them as read-only.
func (c *Cache) Delta(pos uint64) Delta {
	c.mu.Lock()
	defer c.mu.Unlock()
	j := &c.journal
	end := j.end()
	// Positions handed out are end+1, so that 0 always means "nothing read
	// yet", even before the first change.
	d := Delta{Rev: c.rev, Pos: end + 1}
	if pos == 0 || pos-1 < j.base || pos-1 > end {
		d.Full, d.Items = true, maps.Clone(c.items)
		return d
	}
	d.Items = map[string]Item{}
	seen := map[string]bool{}
	for _, k := range j.keys[pos-1-j.base:] {
		if seen[k] {
			continue
		}
		seen[k] = true
		if it, ok := c.items[k]; ok {
			d.Items[k] = it
		} else {
			d.Deleted = append(d.Deleted, k)
		}
	}
	return d
}
