package agent

import (
	"errors"
	"fmt"
	"strings"

	"github.com/meridian-gpu/meridian/internal/protofast"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
)

// IsCancelMsgID reports whether a Nats-Msg-Id on the dispatch subject marks
// a cancel: "cancel:<dispatch id>" (what hub/convert.CancelMsgID writes) or
// "<dispatch id>/cancel" (the form docs/api.md proposes).
func IsCancelMsgID(msgID string) bool {
	return strings.HasPrefix(msgID, "cancel:") || strings.HasSuffix(msgID, "/cancel")
}

// DecodeHubMessage decodes one message of the dispatch subject into a
// HubMessage. It accepts the HubMessage envelope of agent.proto and, for
// hubs that publish the bare messages, a bare Dispatch or DispatchCancel
// (a cancel is recognised by its message id, see IsCancelMsgID, or by
// decoding as a Dispatch without a workload but with fields a Dispatch does
// not have). It never panics; an error means the payload is unusable.
func DecodeHubMessage(msgID string, payload []byte) (*agentv1.HubMessage, error) {
	hm := &agentv1.HubMessage{}
	if err := protofast.Unmarshal(payload, hm); err == nil && len(hm.ProtoReflect().GetUnknown()) == 0 {
		switch {
		case hm.GetDispatch().GetDispatchId() != "" && len(hm.GetDispatch().ProtoReflect().GetUnknown()) == 0:
			return hm, nil
		case hm.GetCancel().GetDispatchId() != "" && len(hm.GetCancel().ProtoReflect().GetUnknown()) == 0:
			return hm, nil
		case len(hm.GetBatch().GetDispatches()) > 0 && len(hm.GetBatch().ProtoReflect().GetUnknown()) == 0:
			return hm, nil // each dispatch is checked as it is handled
		case hm.GetKind() == nil && len(payload) == 0:
			return hm, nil // an empty envelope: a kind this agent does not know
		}
	}
	cancelMsg := func() (*agentv1.HubMessage, error) {
		c := &agentv1.DispatchCancel{}
		if err := protofast.Unmarshal(payload, c); err != nil {
			return nil, fmt.Errorf("decode DispatchCancel: %w", err)
		}
		if c.GetDispatchId() == "" {
			return nil, errors.New("decode DispatchCancel: dispatch_id is empty")
		}
		return &agentv1.HubMessage{Kind: &agentv1.HubMessage_Cancel{Cancel: c}}, nil
	}
	if IsCancelMsgID(msgID) {
		return cancelMsg()
	}
	d := &agentv1.Dispatch{}
	if err := protofast.Unmarshal(payload, d); err != nil {
		return nil, fmt.Errorf("decode HubMessage or Dispatch: %w", err)
	}
	if d.GetDispatchId() == "" {
		return nil, errors.New("decode HubMessage or Dispatch: no dispatch_id")
	}
	if d.GetWorkload() == nil && len(d.ProtoReflect().GetUnknown()) > 0 {
		if hm, err := cancelMsg(); err == nil {
			return hm, nil
		}
	}
	return &agentv1.HubMessage{Kind: &agentv1.HubMessage_Dispatch{Dispatch: d}}, nil
}
