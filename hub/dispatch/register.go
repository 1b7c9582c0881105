package dispatch

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meridian-gpu/meridian/internal/protofast"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// RegisterSubjectPrefix is the core NATS request subject an agent sends
// Register on, followed by its cluster id. The leader answers.
const RegisterSubjectPrefix = "meridian.register."

// Intervals the leader asks agents to keep, in RegisterAck. The heartbeat
// interval is also capped at a quarter of the cluster timeout.
const (
	AgentHeartbeatInterval = 2 * time.Second
	AgentAdvertiseInterval = 10 * time.Second
)

// serveRegister answers agents' Register requests while the term lasts.
func (l *Loop) serveRegister(t *term) (func(), error) {
	sub, err := l.bus.Conn().Subscribe(RegisterSubjectPrefix+"*", func(m *nats.Msg) {
		defer func() {
			if r := recover(); r != nil {
				l.log.Error("register handler panic", "subject", m.Subject, "panic", r)
			}
		}()
		ack := l.answerRegister(t, strings.TrimPrefix(m.Subject, RegisterSubjectPrefix), m.Data)
		b, err := marshalDet(ack)
		if err != nil {
			l.log.Error("encode RegisterAck", "err", err)
			return
		}
		if err := m.Respond(b); err != nil {
			l.log.Warn("answer register", "cluster", ack.GetClusterId(), "err", err)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("dispatch: subscribe %s*: %w", RegisterSubjectPrefix, err)
	}
	if err := l.bus.Conn().FlushWithContext(t.ctx); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("dispatch: subscribe %s*: %w", RegisterSubjectPrefix, err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// answerRegister builds the RegisterAck: accepted for protocol version 1,
// with every dispatch current on the cluster, read after the cache caught up
// with etcd so a just-committed dispatch is never reported stale.
func (l *Loop) answerRegister(t *term, subjectCluster string, payload []byte) *agentv1.RegisterAck {
	ack := &agentv1.RegisterAck{ClusterId: subjectCluster, HubId: l.el.ID(), ProtocolVersion: agentv1.ProtocolVersion_PROTOCOL_VERSION_1,
		HeartbeatInterval: durationpb.New(min(AgentHeartbeatInterval, l.fleet.Timeout()/4)), AdvertiseInterval: durationpb.New(AgentAdvertiseInterval),
		LostTimeout: durationpb.New(l.fleet.Timeout())}
	refuse := func(why string) *agentv1.RegisterAck {
		ack.Accepted, ack.Reason = false, why
		ack.SentAt = tsOf(l.clock())
		l.log.Warn("refused agent", "cluster", subjectCluster, "reason", why)
		return ack
	}
	req := &agentv1.Register{}
	if err := protofast.Unmarshal(payload, req); err != nil {
		return refuse("Register does not decode: " + err.Error())
	}
	if err := natsbus.ValidateClusterID(req.GetClusterId()); err != nil {
		return refuse("cluster_id: " + err.Error())
	}
	if req.GetClusterId() != subjectCluster {
		return refuse(fmt.Sprintf("cluster_id %q does not match the subject's cluster %q", req.GetClusterId(), subjectCluster))
	}
	switch req.GetProtocolVersion() {
	case agentv1.ProtocolVersion_PROTOCOL_VERSION_UNSPECIFIED, agentv1.ProtocolVersion_PROTOCOL_VERSION_1:
	default:
		return refuse(fmt.Sprintf("protocol_version %d is not spoken by this hub (it speaks 1)", req.GetProtocolVersion()))
	}
	if err := l.fleet.ApplyRegister(req); err != nil {
		l.log.Warn("register not recorded in the fleet", "cluster", subjectCluster, "err", err)
	}
	ctx, cancel := context.WithTimeout(t.ctx, 2*time.Second)
	defer cancel()
	if resp, err := l.st.Client().Get(ctx, LedgerKey, clientKeysOnly()...); err == nil {
		if err := l.cache.WaitForRevision(ctx, resp.Header.Revision); err != nil {
			l.log.Warn("register: cache behind etcd; answering from it anyway", "err", err)
		}
	}
	var current []string
	s := l.lockState()
	for id, c := range s.current {
		if c.r.r.Cluster == subjectCluster {
			current = append(current, id)
		}
	}
	l.unlockState()
	sort.Strings(current)
	if l.cfg.AfterRestore {
		current = keepUnknown(current, req)
	}
	ack.Accepted, ack.CurrentDispatchIds = true, current
	ack.Capabilities = []string{agentv1.CapabilityEventBatch}
	ack.SentAt = tsOf(l.clock())
	l.log.Info("agent registered", "cluster", subjectCluster, "session", req.GetSessionId(), "known", len(req.GetKnownDispatchIds()), "current", len(current))
	return ack
}

func clientKeysOnly() []clientv3.OpOption { return []clientv3.OpOption{clientv3.WithKeysOnly()} }
