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

// HeartbeatSubject is meridian.heartbeat.<cluster>.
func HeartbeatSubject(cluster string) (string, error) { return subject(heartbeatRoot, cluster) }

// DispatchConsumer is the durable consumer name for cluster's dispatches.
func DispatchConsumer(cluster string) (string, error) {
	if err := ValidateClusterID(cluster); err != nil {
		return "", err
	}
	return "dispatch-" + cluster, nil
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
