package validation

import (
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Output-only timestamps (create_time, update_time) are set by the server.
// Clients generated from the OpenAPI document or from the protos send them
// anyway with their zero values: go-swagger models write a strfmt.DateTime
// as "0001-01-01T00:00:00.000Z" even when unset, other generators write
// null (which decodes as unset), and a proto Timestamp{} is the Unix epoch.
// UnsetTime says when such a value carries nothing, so validation accepts
// it; the server overwrites or ignores these fields. (An output-only
// message such as status must still be absent or null: generated clients
// leave a nil pointer out.)

// zeroTimeSeconds is 0001-01-01T00:00:00Z in Unix seconds.
const zeroTimeSeconds = -62135596800

// UnsetTime reports whether an output-only timestamp is absent or a zero
// value: nil, 0001-01-01T00:00:00Z or 1970-01-01T00:00:00Z exactly.
func UnsetTime(ts *timestamppb.Timestamp) bool {
	if ts == nil {
		return true
	}
	if ts.GetNanos() != 0 {
		return false
	}
	return ts.GetSeconds() == 0 || ts.GetSeconds() == zeroTimeSeconds
}
