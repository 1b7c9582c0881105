package natsbus

import (
	"fmt"
	"strings"
)

// Stream names.
const (
	StreamDispatch = "DISPATCH"
	StreamEvents   = "EVENTS"
	StreamAdvert   = "ADVERT"
)

// Subject roots; the cluster id is the last token.
const (
	dispatchRoot  = "meridian.dispatch."
	eventsRoot    = "meridian.events."
	advertRoot    = "meridian.advert."
	heartbeatRoot = "meridian.heartbeat."
	registerRoot  = "meridian.register."
	advertAskRoot = "meridian.advert-request."
)

// MaxClusterIDLen bounds a cluster id, so that derived consumer names stay
// well inside NATS limits.
const MaxClusterIDLen = 64

// HubEventsConsumer is the hub's durable consumer on EVENTS.
const HubEventsConsumer = "hub-events"

// ValidateClusterID checks that id can be one NATS subject token and part of
// a consumer name: 1 to 64 characters from letters, digits, '-' and '_'.
// (Subject tokens also forbid '.', '*', '>' and whitespace; consumer names
// forbid path separators; this rule is the safe intersection.)
func ValidateClusterID(id string) error {
	if id == "" {
		return fmt.Errorf("natsbus: cluster id is empty")
	}
	if len(id) > MaxClusterIDLen {
		return fmt.Errorf("natsbus: cluster id %q is %d bytes, more than %d", id, len(id), MaxClusterIDLen)
	}
	for i, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_'
		if !ok {
			return fmt.Errorf("natsbus: cluster id %q has invalid character %q at byte %d (allowed: letters, digits, '-', '_')", id, r, i)
		}
	}
	return nil
}

// DispatchSubject is meridian.dispatch.<cluster>.
func DispatchSubject(cluster string) (string, error) { return subject(dispatchRoot, cluster) }

// EventsSubject is meridian.events.<cluster>.
func EventsSubject(cluster string) (string, error) { return subject(eventsRoot, cluster) }

// AdvertSubject is meridian.advert.<cluster>.
func AdvertSubject(cluster string) (string, error) { return subject(advertRoot, cluster) }

// AdvertRequestSubject is meridian.advert-request.<cluster>, where a hub
// asks the cluster's agent for a full advertisement.
func AdvertRequestSubject(cluster string) (string, error) { return subject(advertAskRoot, cluster) }

// HeartbeatSubject is meridian.heartbeat.<cluster>.
func HeartbeatSubject(cluster string) (string, error) { return subject(heartbeatRoot, cluster) }

// RegisterSubject is meridian.register.<cluster>, the core NATS request an
// agent sends when it (re)connects; the hub's leader answers.
func RegisterSubject(cluster string) (string, error) { return subject(registerRoot, cluster) }

// DispatchConsumer is the durable consumer name for cluster's dispatches.
func DispatchConsumer(cluster string) (string, error) {
	if err := ValidateClusterID(cluster); err != nil {
		return "", err
	}
	return "dispatch-" + cluster, nil
}

// inboxRoot starts every cluster's inbox prefix.
const inboxRoot = "_INBOX_"

// ClusterInboxPrefix is the reply-subject prefix of cluster's agent,
// _INBOX_<cluster>: its NATS user may subscribe to _INBOX_<cluster>.> only.
// Cluster ids are whole tokens, so no cluster's prefix covers another's.
func ClusterInboxPrefix(cluster string) (string, error) { return subject(inboxRoot, cluster) }

func validInboxPrefix(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("natsbus: inbox prefix is empty")
	case strings.ContainsAny(p, "*> \t\r\n"):
		return fmt.Errorf("natsbus: inbox prefix %q has a wildcard or white space", p)
	case strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".") || strings.Contains(p, ".."):
		return fmt.Errorf("natsbus: inbox prefix %q has an empty token", p)
	}
	return nil
}

func subject(root, cluster string) (string, error) {
	if err := ValidateClusterID(cluster); err != nil {
		return "", err
	}
	return root + cluster, nil
}

// clusterOf returns the last token of a subject.
func clusterOf(subject string) string {
	if i := strings.LastIndexByte(subject, '.'); i >= 0 {
		return subject[i+1:]
	}
	return subject
}

// Permissions are NATS subjects a user may publish to and subscribe to;
// everything else is denied.
type Permissions struct {
	Publish   []string
	Subscribe []string
}

// AgentPermissions are the least privileges of cluster's agent, given the
// calls this package makes for it (a connection WithInboxPrefix of
// ClusterInboxPrefix(cluster), which binds to the hub-made consumer):
//
//   - publish its own advert, heartbeat, events and register subjects;
//   - read its own durable dispatch consumer: look it up (CONSUMER.INFO),
//     pull (CONSUMER.MSG.NEXT) and ack, nak or mark in progress
//     ($JS.ACK.DISPATCH.dispatch-<cluster>.>);
//   - subscribe to its own inbox, where pull deliveries, PubAcks and the
//     register reply arrive, and to its own advert-request subject.
//
// Nothing else: no other cluster's subjects, no stream or consumer
// creation, update, purge or delete, no direct gets.
func AgentPermissions(cluster string) (Permissions, error) {
	durable, err := DispatchConsumer(cluster)
	if err != nil {
		return Permissions{}, err
	}
	inbox, _ := ClusterInboxPrefix(cluster)
	return Permissions{
		Publish: []string{
			advertRoot + cluster,
			heartbeatRoot + cluster,
			eventsRoot + cluster,
			registerRoot + cluster,
			"$JS.API.CONSUMER.INFO." + StreamDispatch + "." + durable,
			"$JS.API.CONSUMER.MSG.NEXT." + StreamDispatch + "." + durable,
			"$JS.ACK." + StreamDispatch + "." + durable + ".>",
		},
		Subscribe: []string{inbox + ".>", advertAskRoot + cluster},
	}, nil
}
