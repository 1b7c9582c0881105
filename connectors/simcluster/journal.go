package simcluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// Journal events.
const (
	// JournalLaunch: the cluster started a dispatch (every replica of its
	// gang placed).
	JournalLaunch = "launch"
	// JournalRepeat: a dispatch the cluster knows was delivered again and
	// ignored (an idempotent repeat).
	JournalRepeat = "repeat"
	// JournalEnd: a launched dispatch ended (State says how).
	JournalEnd = "end"
)

// JournalEntry is one line of a launch journal (Options.Journal): the
// cluster's own record of what it launched and how each launch ended, for
// checks that must not trust the hub's account (a soak's "no dispatch
// launched twice").
type JournalEntry struct {
	Time       time.Time `json:"t"`
	Event      string    `json:"ev"`
	DispatchID string    `json:"dispatch"`
	WorkloadID string    `json:"workload,omitempty"`
	// Replicas is how many replicas a launch placed; Wanted how many its
	// pod sets ask for (at least the sum of min_replicas).
	Replicas int `json:"replicas,omitempty"`
	Wanted   int `json:"wanted,omitempty"`
	// Nodes are the nodes a launch placed its replicas on.
	Nodes []string `json:"nodes,omitempty"`
	// State is an end's state (SUCCEEDED, FAILED, PREEMPTED, CANCELLED).
	State  string `json:"state,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// journal writes entries as JSON lines; safe for concurrent use. A write
// error is remembered and stops further writes (the cluster itself goes on).
type journal struct {
	mu  sync.Mutex
	w   io.Writer
	err error
}

func (j *journal) write(e JournalEntry) {
	if j == nil {
		return
	}
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		return
	}
	_, j.err = j.w.Write(append(b, '\n'))
}

// ReadJournal parses a launch journal. A torn last line (the process was
// killed mid-write) is skipped; any other bad line is an error naming it.
func ReadJournal(r io.Reader) ([]JournalEntry, error) {
	var out []JournalEntry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	line, bad := 0, 0
	var badErr error
	for sc.Scan() {
		line++
		if bad > 0 {
			return nil, badErr
		}
		var e JournalEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			bad, badErr = line, fmt.Errorf("simcluster: journal line %d: %w", line, err)
			continue
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("simcluster: journal: %w", err)
	}
	return out, nil
}

// journalState names a terminal state as the API's phases do.
func journalState(s agent.WorkState) string {
	switch s {
	case agent.StateSucceeded:
		return "SUCCEEDED"
	case agent.StateFailed:
		return "FAILED"
	case agent.StatePreempted:
		return "PREEMPTED"
	case agent.StateCancelled:
		return "CANCELLED"
	}
	return s.String()
}

// wantedReplicas is the fewest replicas a launch of wl may place: each pod
// set's min_replicas when it is elastic, else its replicas.
func wantedReplicas(wl *meridianv1.Workload) int {
	n := 0
	for _, ps := range wl.GetPodSets() {
		r := int(ps.GetReplicas())
		if m := int(ps.GetMinReplicas()); m > 0 && m < r {
			r = m
		}
		n += r
	}
	return n
}
