package convert

import (
	"strings"

	"github.com/meridian-gpu/meridian/hub/scheduler"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
)

// Placement turns a plan's placement into the agent's hint: one entry per
// pod set, in the order the plan lists them, with the node of each replica,
// the replica count the hub admitted (what the connector launches: for an
// elastic pod set the size the hub chose and charged) and the MIG profile.
func Placement(ps []scheduler.PodSetPlacement) []*agentv1.PodSetPlacement {
	out := make([]*agentv1.PodSetPlacement, 0, len(ps))
	for _, p := range ps {
		ap := &agentv1.PodSetPlacement{PodSet: p.PodSet, Nodes: make([]string, 0, len(p.Replicas)),
			Replicas: int32(len(p.Replicas)), MigProfile: p.MIG}
		for _, r := range p.Replicas {
			ap.Nodes = append(ap.Nodes, r.Node)
		}
		out = append(out, ap)
	}
	return out
}

// cancelPrefix marks a DispatchCancel's message id on the dispatch subject.
const cancelPrefix = "cancel:"

// CancelMsgID is the Nats-Msg-Id of the DispatchCancel for dispatchID. The
// dispatch subject carries both Dispatch and DispatchCancel payloads; a
// receiver tells them apart by this id (see IsCancelMsgID).
func CancelMsgID(dispatchID string) string { return cancelPrefix + dispatchID }

// IsCancelMsgID reports whether a message id on the dispatch subject names a
// DispatchCancel, and returns the dispatch id it cancels.
func IsCancelMsgID(msgID string) (string, bool) {
	return strings.CutPrefix(msgID, cancelPrefix)
}
