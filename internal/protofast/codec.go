package protofast

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto" // registers gRPC's own codec, the fallback
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Codec is gRPC's protobuf codec (encoding.CodecV2, named "proto", so the
// wire is unchanged) with Marshal and Unmarshal from this package: the
// generated code where a message has it, gRPC's own codec for anything
// else. Install it with ServerOption and DialOption.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// fallback is gRPC's default codec, registered by its encoding/proto
// package (imported above, so registered before this package's
// variables are set).
var fallback = encoding.GetCodecV2(grpcproto.Name)

// Name is "proto": the content-subtype gRPC's default codec uses.
func (Codec) Name() string { return grpcproto.Name }

// Marshal encodes v into one buffer, from gRPC's pool for large messages
// as gRPC's codec does.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return fallback.Marshal(v)
	}
	vt, t, ok := vtEncoder(m)
	if !ok {
		return fallback.Marshal(v)
	}
	size := vt.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		b := make([]byte, size)
		if !encodeVT(vt, t, b) {
			return fallback.Marshal(v)
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	pool := mem.DefaultBufferPool()
	bp := pool.Get(size)
	*bp = (*bp)[:size]
	if !encodeVT(vt, t, *bp) {
		pool.Put(bp)
		return fallback.Marshal(v)
	}
	return mem.BufferSlice{mem.NewBuffer(bp, pool)}, nil
}

// Unmarshal decodes data into v with Unmarshal; the buffer it gathers
// data into goes back to gRPC's pool at once (Unmarshal copies what it
// keeps).
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fallback.Unmarshal(data, v)
	}
	if _, ok := m.(vtUnmarshaler); !ok {
		return fallback.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return Unmarshal(buf.ReadOnlyData(), m)
}

// ServerOption makes a gRPC server use Codec for every request and
// response, whatever content-subtype the client sent.
func ServerOption() grpc.ServerOption { return grpc.ForceServerCodecV2(Codec{}) }

// DialOption makes a client connection use Codec for every call.
func DialOption() grpc.DialOption {
	return grpc.WithDefaultCallOptions(grpc.ForceCodecV2(Codec{}))
}
