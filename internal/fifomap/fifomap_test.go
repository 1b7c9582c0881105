package fifomap

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// Every key put is found with its value until the bound forgets it,
// oldest first, and a key put again answers with its newest value.
func TestPutGetForgetsOldestFirst(t *testing.T) {
	m := New(1000)
	for i := range 2500 {
		m.Put(fmt.Sprintf("d-%d", i), []byte(fmt.Sprintf("answer %d", i)))
	}
	if m.Len() != 1000 {
		t.Fatalf("Len = %d, want the bound 1000", m.Len())
	}
	for i := range 2500 {
		v, ok := m.Get(fmt.Sprintf("d-%d", i))
		if want := i >= 1500; ok != want {
			t.Fatalf("d-%d held = %v, want %v", i, ok, want)
		}
		if ok && string(v) != fmt.Sprintf("answer %d", i) {
			t.Fatalf("d-%d = %q", i, v)
		}
	}
	m.Put("d-2000", []byte("newer"))
	if v, _ := m.Get("d-2000"); string(v) != "newer" {
		t.Fatalf("d-2000 after a second put = %q, want newer", v)
	}
	if m.Has("absent") {
		t.Fatal("a key never put is held")
	}
}

// A value handed out stays the same after later puts and evictions, and
// the map copies what it is given.
func TestValuesAreStable(t *testing.T) {
	m := New(10)
	in := []byte("first")
	m.Put("a", in)
	in[0] = 'X'
	v, _ := m.Get("a")
	for i := range 50 {
		m.Put(fmt.Sprint(i), bytes.Repeat([]byte{'z'}, 100))
	}
	if string(v) != "first" {
		t.Fatalf("value changed to %q", v)
	}
}

// Entries larger than a chunk, empty keys and empty values all round-trip.
func TestOddSizes(t *testing.T) {
	m := New(5)
	big := bytes.Repeat([]byte{7}, 3*chunkSize)
	m.Put("big", big)
	m.Put("", []byte("empty key"))
	m.Put("empty value", nil)
	if v, ok := m.Get("big"); !ok || !bytes.Equal(v, big) {
		t.Fatal("an entry larger than a chunk did not round-trip")
	}
	if v, ok := m.Get(""); !ok || string(v) != "empty key" {
		t.Fatalf("empty key = %q, %v", v, ok)
	}
	if v, ok := m.Get("empty value"); !ok || len(v) != 0 {
		t.Fatalf("empty value = %q, %v", v, ok)
	}
}

// Two keys with the same hash: the lookup compares keys, so the older is
// forgotten, never answered with the newer's value.
func TestCollisionNeverAnswersAnotherKey(t *testing.T) {
	m := New(10)
	m.Put("a", []byte("A"))
	// Force b onto a's hash: what a real collision does to the index.
	m.Put("b", []byte("B"))
	m.index[m.slotOf(1).hash] = 0 // b's hash now points at a's entry
	if _, ok := m.Get("b"); ok {
		t.Fatal("b answered with a's entry")
	}
	if v, ok := m.Get("a"); !ok || string(v) != "A" {
		t.Fatalf("a = %q, %v", v, ok)
	}
}

// ForgetOldestWhile drops entries put in time order up to a cut-off, and
// PutUint64/Uint64 round-trip.
func TestForgetOldestWhile(t *testing.T) {
	m := New(100)
	for i := range 10 {
		m.PutUint64(fmt.Sprint(i), uint64(i*10))
	}
	n := m.ForgetOldestWhile(func(v []byte) bool { return len(v) == 8 && v[0] < 40 })
	if n != 4 || m.Len() != 6 || m.Has("3") || !m.Has("4") {
		t.Fatalf("forgot %d, Len %d, want 4 and 6 with 4 held", n, m.Len())
	}
	got, _ := m.Get("9")
	if v, ok := Uint64(got); !ok || v != 90 {
		t.Fatalf("Uint64(9) = %d, %v", v, ok)
	}
	m.ForgetOldestWhile(func([]byte) bool { return true })
	if m.Len() != 0 || m.Has("9") {
		t.Fatal("forgetting everything left entries")
	}
	m.Put("after", []byte("x"))
	if !m.Has("after") {
		t.Fatal("a put after emptying is lost")
	}
}

// Random puts, checked against a plain map and a FIFO of keys.
func TestAgainstModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const limit = 300
	m := New(limit)
	type ent struct{ k, v string }
	var order []ent
	for range 20000 {
		k := fmt.Sprint(r.IntN(2000))
		v := string(bytes.Repeat([]byte{byte('a' + r.IntN(26))}, r.IntN(300)))
		m.Put(k, []byte(v))
		order = append(order, ent{k, v})
		if len(order) > limit {
			order = order[1:]
		}
	}
	want := map[string]string{}
	for _, e := range order {
		want[e.k] = e.v
	}
	for i := range 2000 {
		k := fmt.Sprint(i)
		v, ok := m.Get(k)
		w, wok := want[k]
		if ok != wok || string(v) != w {
			t.Fatalf("key %s: got %q %v, want %q %v", k, v, ok, w, wok)
		}
	}
	ranged := map[string]string{}
	m.Range(func(k string, v []byte) bool {
		if _, twice := ranged[k]; twice {
			t.Fatalf("Range gave key %s twice", k)
		}
		ranged[k] = string(v)
		return true
	})
	if len(ranged) != len(want) {
		t.Fatalf("Range gave %d keys, want %d", len(ranged), len(want))
	}
	for k, v := range want {
		if ranged[k] != v {
			t.Fatalf("Range gave %s = %q, want %q", k, ranged[k], v)
		}
	}
	if len(m.ring) > limit {
		t.Fatalf("ring of %d slots for %d entries: it grew past the limit", len(m.ring), limit)
	}
	if len(m.chunks) > limit*300/chunkSize+2 {
		t.Fatalf("%d chunks held for %d entries: forgotten chunks are not released", len(m.chunks), limit)
	}
}

// The index and slots hold no pointers, so a full map is a handful of
// objects for the collector however many entries it holds.
func TestFewObjects(t *testing.T) {
	m := New(100000)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 100000 {
		m.Put(fmt.Sprintf("dispatch-%08d", i), bytes.Repeat([]byte{1}, 150))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if live := int64(after.HeapObjects) - int64(before.HeapObjects); live > 2000 {
		t.Fatalf("100,000 entries are %d live objects, want a few hundred", live)
	}
	runtime.KeepAlive(m)
}

func BenchmarkPut(b *testing.B) {
	m := New(100000)
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = fmt.Sprintf("dispatch-%08d", i)
	}
	v := bytes.Repeat([]byte{1}, 150)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		m.Put(keys[i%len(keys)], v)
	}
}

func BenchmarkGet(b *testing.B) {
	m := New(100000)
	keys := make([]string, 100000)
	for i := range keys {
		keys[i] = fmt.Sprintf("dispatch-%08d", i)
		m.Put(keys[i], bytes.Repeat([]byte{1}, 150))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, ok := m.Get(keys[i%len(keys)]); !ok {
			b.Fatal("missing")
		}
	}
}

// Puts and forgets interleaved, so that the ring wraps before it grows
// and grows while wrapped, checked against a FIFO of keys after each step.
func TestRingWrapsAndGrows(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const limit = 1000
	m := New(limit)
	type ent struct {
		k string
		v uint64
	}
	var order []ent // what the map holds, oldest first
	next := uint64(0)
	for step := range 5000 {
		if r.IntN(4) == 0 && len(order) > 0 {
			cut := order[r.IntN(len(order))].v
			m.ForgetOldestWhile(func(v []byte) bool { x, _ := Uint64(v); return x < cut })
			for len(order) > 0 && order[0].v < cut {
				order = order[1:]
			}
		} else {
			for range r.IntN(200) {
				k := fmt.Sprintf("k%d", next) // every key new: the FIFO is the model
				m.PutUint64(k, next)
				order = append(order, ent{k, next})
				next++
				if len(order) > limit {
					order = order[1:]
				}
			}
		}
		if m.Len() != len(order) {
			t.Fatalf("step %d: Len %d, want %d", step, m.Len(), len(order))
		}
		if len(order) > 0 {
			for _, e := range []ent{order[0], order[len(order)/2], order[len(order)-1]} {
				v, ok := m.Get(e.k)
				if x, _ := Uint64(v); !ok || x != e.v {
					t.Fatalf("step %d: %s = %d %v, want %d", step, e.k, x, ok, e.v)
				}
			}
		}
		i := 0
		m.Range(func(k string, v []byte) bool {
			if x, _ := Uint64(v); k != order[i].k || x != order[i].v {
				t.Fatalf("step %d: Range's entry %d is %s, want %s", step, i, k, order[i].k)
			}
			i++
			return true
		})
		if i != len(order) {
			t.Fatalf("step %d: Range gave %d entries, want %d", step, i, len(order))
		}
	}
	if len(m.ring) > limit {
		t.Fatalf("ring of %d slots for a limit of %d", len(m.ring), limit)
	}
}
