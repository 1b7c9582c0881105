package api

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-gpu/meridian/hub/store"
	"github.com/meridian-gpu/meridian/internal/protofast"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// WorkloadKey is the etcd key of a workload record.
func WorkloadKey(id string) (string, error) { return store.Key(store.KindWorkloads, id) }

// CancelRequestKey is the etcd key of the cancel request for a workload.
func CancelRequestKey(id string) (string, error) { return store.Key(store.KindCancelRequests, id) }

// QueueKey is the etcd key of a queue record; the queue path (with its
// '/' separators) is the id, so a queue's descendants share the prefix
// QueueKey(path)+"/".
func QueueKey(path string) (string, error) { return store.Key(store.KindQueues, path) }

// IdempotencyKey is the etcd key of the idempotency record for a client
// key in a queue: the hex SHA-256 of queue, a NUL and the key.
func IdempotencyKey(queue, key string) string {
	h := sha256.Sum256([]byte(queue + "\x00" + key))
	k, _ := store.Key(store.KindIdempotency, hex.EncodeToString(h[:]))
	return k
}

// marshal is how every record is written: deterministic so equal records
// are equal bytes (proto's deterministic encoding, written by the
// generated code).
func marshal(m proto.Message) ([]byte, error) {
	b, err := protofast.MarshalDeterministic(m)
	if err != nil {
		return nil, fmt.Errorf("api: marshal %T: %w", m, err)
	}
	return b, nil
}

// DecodeWorkloadRecord parses a stored workload.
func DecodeWorkloadRecord(b []byte) (*meridianv1.Workload, error) {
	w := &meridianv1.Workload{}
	if err := protofast.Unmarshal(b, w); err != nil {
		return nil, fmt.Errorf("api: decode workload record: %w", err)
	}
	return w, nil
}

// DecodeQueueRecord parses a stored queue.
func DecodeQueueRecord(b []byte) (*meridianv1.Queue, error) {
	q := &meridianv1.Queue{}
	if err := protofast.Unmarshal(b, q); err != nil {
		return nil, fmt.Errorf("api: decode queue record: %w", err)
	}
	return q, nil
}

// IsTerminal reports whether a phase is final.
func IsTerminal(p meridianv1.WorkloadPhase) bool {
	switch p {
	case meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED,
		meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED,
		meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED:
		return true
	}
	return false
}
