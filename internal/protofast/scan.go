package protofast

import (
	"bytes"
	"cmp"
	"slices"
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// recursionLimit is proto's default limit on message nesting
// (protowire.DefaultRecursionLimit). Deeper input is left to proto, which
// refuses it; UnmarshalVT would recurse until the stack overflowed.
const recursionLimit = 10000

// fieldKind is what the scan does with a known field of wire type bytes.
type fieldKind uint8

const (
	kindSkip    fieldKind = iota // unknown, bytes, or a string proto does not validate
	kindString                   // a string proto validates as UTF-8
	kindMessage                  // a message: scan inside
	kindMap                      // a map entry: scan inside, and sort for deterministic output
)

type fieldInfo struct {
	kind  fieldKind
	known bool // a field of the message (not an unknown one)
	wire  protowire.Type
	list  bool // repeated: a packed scalar may come as bytes
	sub   *table
	key   protoreflect.Kind // a map's key kind
}

// table is what the scan needs of one message type, built once from its
// descriptor.
type table struct {
	dense  []fieldInfo // by field number, for numbers below len(dense)
	sparse map[protowire.Number]*fieldInfo
	// hasMap: a map field is reachable from this message, so its
	// deterministic encoding may need sorting.
	hasMap bool
	// ok: the scan understands every field (no groups, no sortable map
	// key of a kind it cannot order); otherwise proto does all the work.
	ok bool
	// wellKnown: a google.protobuf type, which vtprotobuf decodes and
	// encodes through wrappers that drop unknown fields. The scan refuses
	// an unknown field in one, so proto decodes it and keeps it.
	wellKnown bool
}

// field is the field numbered n, nil when the message has none.
func (t *table) field(n protowire.Number) *fieldInfo {
	if int(n) < len(t.dense) {
		if f := &t.dense[n]; f.known {
			return f
		}
		return nil
	}
	return t.sparse[n]
}

var tables sync.Map // protoreflect.MessageDescriptor -> *table

// tableOf returns the table of md, building it (and the tables of the
// messages it reaches) on first use.
func tableOf(md protoreflect.MessageDescriptor) *table {
	if t, ok := tables.Load(md); ok {
		return t.(*table)
	}
	building := map[protoreflect.MessageDescriptor]*table{}
	t := build(md, building)
	// Fix hasMap and ok over cycles (Struct -> Value -> Struct) now that
	// every table exists: iterate to a fixed point.
	for changed := true; changed; {
		changed = false
		for _, bt := range building {
			for _, f := range bt.all() {
				if f.sub == nil {
					continue
				}
				if f.sub.hasMap && !bt.hasMap {
					bt.hasMap, changed = true, true
				}
				if !f.sub.ok && bt.ok {
					bt.ok, changed = false, true
				}
			}
		}
	}
	for d, bt := range building {
		tables.LoadOrStore(d, bt)
	}
	return t
}

func (t *table) all() []fieldInfo {
	out := append([]fieldInfo(nil), t.dense...)
	for _, f := range t.sparse {
		out = append(out, *f)
	}
	return out
}

func build(md protoreflect.MessageDescriptor, building map[protoreflect.MessageDescriptor]*table) *table {
	if t, ok := tables.Load(md); ok {
		return t.(*table)
	}
	if t, ok := building[md]; ok {
		return t
	}
	t := &table{ok: true, wellKnown: md.ParentFile().Package() == "google.protobuf"}
	building[md] = t
	fields := md.Fields()
	maxDense := protowire.Number(0)
	for i := 0; i < fields.Len(); i++ {
		if n := fields.Get(i).Number(); n < 64 && n > maxDense {
			maxDense = n
		}
	}
	t.dense = make([]fieldInfo, maxDense+1)
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		var f fieldInfo
		switch {
		case fd.Kind() == protoreflect.GroupKind:
			t.ok = false
		case fd.IsMap():
			f = fieldInfo{kind: kindMap, sub: build(fd.Message(), building), key: fd.MapKey().Kind()}
			t.hasMap = true
			if !sortableKey(f.key) {
				t.ok = false
			}
		case fd.Kind() == protoreflect.MessageKind:
			f = fieldInfo{kind: kindMessage, sub: build(fd.Message(), building)}
		case fd.Kind() == protoreflect.StringKind && enforceUTF8(fd):
			f = fieldInfo{kind: kindString}
		}
		f.known, f.wire, f.list = true, wireOf(fd.Kind()), fd.IsList()
		if fd.Number() <= maxDense {
			t.dense[fd.Number()] = f
		} else {
			if t.sparse == nil {
				t.sparse = map[protowire.Number]*fieldInfo{}
			}
			t.sparse[fd.Number()] = &f
		}
	}
	return t
}

// wireOf is the wire type a field of kind k is written with (unpacked).
func wireOf(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.BoolKind, protoreflect.EnumKind, protoreflect.Int32Kind, protoreflect.Sint32Kind,
		protoreflect.Uint32Kind, protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Uint64Kind:
		return protowire.VarintType
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	case protoreflect.GroupKind:
		return protowire.StartGroupType
	}
	return protowire.BytesType
}

// enforceUTF8 is google.golang.org/protobuf/internal/strs.EnforceUTF8:
// whether proto checks that the string field holds UTF-8.
func enforceUTF8(fd protoreflect.FieldDescriptor) bool {
	if fd.Syntax() == protoreflect.Editions {
		if e, ok := fd.(interface{ EnforceUTF8() bool }); ok {
			return e.EnforceUTF8()
		}
	}
	return fd.Syntax() == protoreflect.Proto3
}

// check reports whether b, an encoding of t's message, is one that proto
// would decode (or, for output, would have written): every tag and
// length parses, every validated string is UTF-8, nesting stays within
// the recursion limit. false means "ask proto", not "invalid".
func (t *table) check(b []byte, depth int) bool {
	if depth > recursionLimit {
		return false
	}
	for i := 0; i < len(b); {
		// The tag; most are one byte. proto keeps an unknown field with
		// its tag re-encoded in the fewest bytes, UnmarshalVT as it came:
		// an overlong tag is left to proto.
		var tag uint64
		if c := b[i]; c < 0x80 {
			tag = uint64(c)
			i++
		} else {
			v, n := protowire.ConsumeVarint(b[i:])
			if n < 0 || n != protowire.SizeVarint(v) {
				return false
			}
			tag = v
			i += n
		}
		if tag>>3 < uint64(protowire.MinValidNumber) || tag>>3 > uint64(protowire.MaxValidNumber) {
			return false
		}
		num, typ := protowire.Number(tag>>3), protowire.Type(tag&7)
		f := t.field(num)
		if f == nil {
			if t.wellKnown {
				return false
			}
		} else if typ != f.wire && !(f.list && typ == protowire.BytesType) {
			// A known field with another wire type is an unknown field to
			// proto; UnmarshalVT refuses it, or in a map entry misreads it.
			return false
		}
		switch typ {
		case protowire.VarintType:
			if i < len(b) && b[i] < 0x80 {
				i++
				continue
			}
			_, n := protowire.ConsumeVarint(b[i:])
			if n < 0 {
				return false
			}
			i += n
		case protowire.Fixed32Type:
			if i += 4; i > len(b) {
				return false
			}
		case protowire.Fixed64Type:
			if i += 8; i > len(b) {
				return false
			}
		case protowire.BytesType:
			var size uint64
			if i < len(b) && b[i] < 0x80 {
				size = uint64(b[i])
				i++
			} else {
				v, n := protowire.ConsumeVarint(b[i:])
				if n < 0 {
					return false
				}
				size = v
				i += n
			}
			if size > uint64(len(b)-i) {
				return false
			}
			v := b[i : i+int(size)]
			i += int(size)
			if f == nil {
				continue
			}
			if f.list && f.wire != protowire.BytesType && !packedOK(v, f.wire) {
				return false
			}
			switch f.kind {
			case kindString:
				if !utf8.Valid(v) {
					return false
				}
			case kindMessage, kindMap:
				if !f.sub.check(v, depth+1) {
					return false
				}
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, b[i:])
			if n < 0 {
				return false
			}
			i += n
		}
	}
	return true
}

// packedOK reports whether v is a whole number of packed values of wire
// type w. (UnmarshalVT would read a varint on past the end of v.)
func packedOK(v []byte, w protowire.Type) bool {
	switch w {
	case protowire.VarintType:
		for len(v) > 0 {
			_, n := protowire.ConsumeVarint(v)
			if n < 0 {
				return false
			}
			v = v[n:]
		}
		return true
	case protowire.Fixed32Type:
		return len(v)%4 == 0
	case protowire.Fixed64Type:
		return len(v)%8 == 0
	}
	return false
}

// sortMaps puts the entries of every map in b, an encoding of t's message
// as vtprotobuf writes it, in proto's deterministic order (by key), in
// place. The entries of one map are written together, so each map is one
// run of records; reordering records changes no length. It reports false
// for input it does not understand (then proto marshals instead).
func (t *table) sortMaps(b []byte) bool {
	if !t.hasMap {
		return true
	}
	var arr [16]mapEntry
	runs := arr[:0]
	for off := 0; off < len(b); {
		num, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 {
			return false
		}
		if typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, b[off+n:])
			if m < 0 {
				return false
			}
			off += n + m
			continue
		}
		v, m := protowire.ConsumeBytes(b[off+n:])
		if m < 0 {
			return false
		}
		start, end := off, off+n+m
		valStart := end - len(v)
		off = end
		f := t.field(num)
		if f == nil {
			continue
		}
		switch f.kind {
		case kindMessage:
			if !f.sub.sortMaps(b[valStart:end]) {
				return false
			}
		case kindMap:
			if !f.sub.sortMaps(b[valStart:end]) {
				return false
			}
			e, ok := entryOf(b, start, end, valStart, f.key)
			if !ok {
				return false
			}
			e.num = num
			runs = append(runs, e)
			// Sort the run when the next record is not this map's.
			if off < len(b) {
				if next, _, n := protowire.ConsumeTag(b[off:]); n > 0 && next == num {
					continue
				}
			}
			sortRun(b, runs)
			runs = runs[:0]
		}
	}
	return true
}

// mapEntry is one record of a map field: b[start:end], its key already
// read.
type mapEntry struct {
	num        protowire.Number
	start, end int
	str        []byte // string key
	num64      uint64 // integer or bool key, ordered per kind
	signed     bool
}

func sortableKey(k protoreflect.Kind) bool {
	switch k {
	case protoreflect.StringKind, protoreflect.BoolKind,
		protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Sint32Kind, protoreflect.Sint64Kind,
		protoreflect.Sfixed32Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
		return true
	}
	return false
}

// entryOf reads the key of the map entry whose message is b[valStart:end].
// A missing key is the zero key, as proto reads it; the last key wins.
func entryOf(b []byte, start, end, valStart int, kind protoreflect.Kind) (mapEntry, bool) {
	e := mapEntry{start: start, end: end}
	switch kind {
	case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Sint32Kind, protoreflect.Sint64Kind,
		protoreflect.Sfixed32Kind, protoreflect.Sfixed64Kind:
		e.signed = true
	}
	for v := b[valStart:end]; len(v) > 0; {
		num, typ, n := protowire.ConsumeTag(v)
		if n < 0 {
			return e, false
		}
		v = v[n:]
		if num != 1 {
			m := protowire.ConsumeFieldValue(num, typ, v)
			if m < 0 {
				return e, false
			}
			v = v[m:]
			continue
		}
		switch {
		case kind == protoreflect.StringKind && typ == protowire.BytesType:
			s, m := protowire.ConsumeBytes(v)
			if m < 0 {
				return e, false
			}
			e.str, v = s, v[m:]
		case typ == protowire.VarintType:
			x, m := protowire.ConsumeVarint(v)
			if m < 0 {
				return e, false
			}
			switch kind {
			case protoreflect.Int32Kind:
				x = uint64(int64(int32(x)))
			case protoreflect.Sint32Kind:
				x = uint64(int64(int32(protowire.DecodeZigZag(x & 0xffffffff))))
			case protoreflect.Sint64Kind:
				x = uint64(protowire.DecodeZigZag(x))
			case protoreflect.Uint32Kind:
				x = uint64(uint32(x))
			case protoreflect.BoolKind:
				x = boolToUint(protowire.DecodeBool(x)) // false before true
			}
			e.num64, v = x, v[m:]
		case typ == protowire.Fixed32Type:
			x, m := protowire.ConsumeFixed32(v)
			if m < 0 {
				return e, false
			}
			if kind == protoreflect.Sfixed32Kind {
				e.num64 = uint64(int64(int32(x)))
			} else {
				e.num64 = uint64(x)
			}
			v = v[m:]
		case typ == protowire.Fixed64Type:
			x, m := protowire.ConsumeFixed64(v)
			if m < 0 {
				return e, false
			}
			e.num64, v = x, v[m:]
		default:
			// A key of an unexpected wire type: proto would not have
			// written it. Let proto marshal.
			return e, false
		}
	}
	return e, true
}

func boolToUint(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func sortRun(b []byte, run []mapEntry) {
	if len(run) < 2 || slices.IsSortedFunc(run, compareEntries) {
		return
	}
	lo, hi := run[0].start, run[len(run)-1].end
	slices.SortFunc(run, compareEntries)
	var small [512]byte
	scratch := small[:0]
	for _, e := range run {
		scratch = append(scratch, b[e.start:e.end]...)
	}
	copy(b[lo:hi], scratch)
}

func compareEntries(x, y mapEntry) int {
	if x.signed {
		return cmp.Compare(int64(x.num64), int64(y.num64))
	}
	if c := bytes.Compare(x.str, y.str); c != 0 {
		return c
	}
	return cmp.Compare(x.num64, y.num64)
}
