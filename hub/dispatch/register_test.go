package dispatch

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
)

func TestRegisterAnswers(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 8)
	ag := e.startAgent("east", 1, 8, 0)
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	e.submit(gpuWorkload("w", "acme/ml/train", 1))
	did := e.waitRunningOn("w", "east", 10*time.Second)

	ask := func(subjectCluster string, req *agentv1.Register) *agentv1.RegisterAck {
		t.Helper()
		b, _ := proto.Marshal(req)
		msg, err := ag.bus.Conn().Request(RegisterSubjectPrefix+subjectCluster, b, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ack := &agentv1.RegisterAck{}
		if err := proto.Unmarshal(msg.Data, ack); err != nil {
			t.Fatal(err)
		}
		return ack
	}
	tests := map[string]struct {
		subject     string
		req         *agentv1.Register
		accepted    bool
		current     string
		reasonNames string
	}{
		"current and stale ids": {
			subject: "east", req: &agentv1.Register{ClusterId: "east", ProtocolVersion: agentv1.ProtocolVersion_PROTOCOL_VERSION_1, AgentVersion: "v9.9", KnownDispatchIds: []string{did, "d-stale"}},
			accepted: true, current: did,
		},
		"another cluster holds nothing": {
			subject: "west", req: &agentv1.Register{ClusterId: "west"}, accepted: true, current: "",
		},
		"future protocol refused": {
			subject: "east", req: &agentv1.Register{ClusterId: "east", ProtocolVersion: 7}, reasonNames: "protocol_version",
		},
		"subject mismatch refused": {
			subject: "west", req: &agentv1.Register{ClusterId: "east"}, reasonNames: "cluster_id",
		},
	}
	names := []string{"current and stale ids", "another cluster holds nothing", "future protocol refused", "subject mismatch refused"}
	for _, name := range names {
		tc := tests[name]
		t.Run(name, func(t *testing.T) {
			ack := ask(tc.subject, tc.req)
			if ack.GetAccepted() != tc.accepted {
				t.Fatalf("accepted = %v (%s), want %v", ack.GetAccepted(), ack.GetReason(), tc.accepted)
			}
			if !tc.accepted {
				if !strings.Contains(ack.GetReason(), tc.reasonNames) {
					t.Fatalf("reason %q does not name %s", ack.GetReason(), tc.reasonNames)
				}
				return
			}
			if got := strings.Join(ack.GetCurrentDispatchIds(), ","); got != tc.current {
				t.Fatalf("current = %q, want %q", got, tc.current)
			}
			if ack.GetHubId() != "hub-a" || ack.GetLostTimeout().AsDuration() != fastConfig().ClusterTimeout || ack.GetHeartbeatInterval().AsDuration() <= 0 {
				t.Fatalf("ack = %v", ack)
			}
		})
	}
	if c, _ := h.loop.GetCluster("east"); c.GetAgentVersion() != "v9.9" {
		t.Fatalf("agent version = %q, want the one from Register", c.GetAgentVersion())
	}
}
