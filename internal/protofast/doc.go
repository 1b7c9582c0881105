// Package protofast encodes and decodes protobuf messages with the
// reflection-free code vtprotobuf generates beside them
// (proto/meridian/{v1,agent/v1}/*_vtproto.pb.go), and falls back to
// google.golang.org/protobuf for any message without it. Every function
// here is a drop-in replacement for its proto counterpart: same bytes in,
// same message out, same errors, so a caller changes its import and
// nothing else.
//
// The generated code alone is not quite that, and this package closes the
// gaps:
//
//   - UnmarshalVT does not check that proto3 strings are UTF-8, has no
//     recursion limit, and refuses a known field sent with another wire
//     type (proto keeps it as an unknown field). Unmarshal first scans the
//     bytes without building anything (tags, lengths, UTF-8 of the string
//     fields, nesting depth; a few percent of a decode) and hands anything
//     the scan or UnmarshalVT refuses to proto.Unmarshal, whose answer
//     stands. Unknown fields are kept as proto keeps them, so forward
//     compatibility is unchanged.
//   - MarshalVT does not check UTF-8 either: Marshal scans its output the
//     same way and lets proto.Marshal answer (with its error) when a
//     string is not UTF-8.
//   - MarshalVT writes map entries in Go's map order. MarshalDeterministic
//     then sorts each map's entries in place, by key as proto's
//     deterministic marshalling does; nothing else in the encoding depends
//     on the order (fields by number, oneofs last, unknown fields at the
//     end, as proto writes them).
//   - vtprotobuf handles the well-known types (Timestamp, Duration,
//     Struct...) through wrappers that drop unknown fields. The scan
//     refuses an unknown field inside one, so proto decodes it.
//
// Two differences are left, both in encoding and both beyond what a peer
// following the schema sends: a double or float field without presence
// that holds negative zero is written by proto and omitted by vtprotobuf
// (it decodes as positive zero), and unknown fields inside a well-known
// type (which Google does not extend) are dropped.
//
// Codec is the gRPC codec (encoding.CodecV2, name "proto") that uses the
// same functions. It is installed explicitly, with ServerOption on the
// hub's server and DialOption on clients, never registered globally: a
// library package that silently replaced gRPC's codec for every importer
// would surprise.
//
// # What it must never do
//
//   - give a result that proto.Unmarshal, proto.Marshal or deterministic
//     proto.Marshal would not have given for the same input (the tests and
//     FuzzUnmarshalMatchesProto compare them);
//   - keep a reference to the bytes it decoded: UnmarshalVT copies
//     strings, bytes and unknown fields, so a caller may reuse its buffer
//     (the gRPC codec frees its own at once).
package protofast
