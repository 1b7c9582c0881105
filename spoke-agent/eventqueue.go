package agent

import "sync"

// EventQueue is the buffer every connector puts between itself and the
// agent: Push never blocks and never drops (a connector may call it with its
// own lock held, from a poll loop or an informer), and a pump goroutine hands
// the events to Events() in the order they were pushed. It implements the
// Events half of the Connector contract.
type EventQueue struct {
	mu    sync.Mutex
	queue []WorkEvent
	wake  chan struct{}
	out   chan WorkEvent
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

// NewEventQueue starts an empty queue and its pump.
func NewEventQueue() *EventQueue {
	q := &EventQueue{wake: make(chan struct{}, 1), out: make(chan WorkEvent), stop: make(chan struct{}), done: make(chan struct{})}
	go q.pump()
	return q
}

// Push appends ev. It never blocks.
func (q *EventQueue) Push(ev WorkEvent) {
	q.mu.Lock()
	q.queue = append(q.queue, ev)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Events is the channel the agent reads; it is the same on every call.
func (q *EventQueue) Events() <-chan WorkEvent { return q.out }

// Len is how many events wait to be read.
func (q *EventQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}

// Close stops the pump and waits for it; events not yet read are dropped.
// It is idempotent.
func (q *EventQueue) Close() {
	q.once.Do(func() { close(q.stop) })
	<-q.done
}

func (q *EventQueue) pump() {
	defer close(q.done)
	for {
		q.mu.Lock()
		var ev WorkEvent
		has := len(q.queue) > 0
		if has {
			ev = q.queue[0]
			q.queue = q.queue[1:]
		}
		q.mu.Unlock()
		if !has {
			select {
			case <-q.wake:
				continue
			case <-q.stop:
				return
			}
		}
		select {
		case q.out <- ev:
		case <-q.stop:
			return
		}
	}
}
