package hub

import "sync"

// Queue is the bounded mailbox of one connection. The connection's writer
// drains C; when the queue is full the connection is too slow to keep up, so
// it is evicted (Evicted closes) rather than waited on.
type Queue struct {
	ch      chan Message
	evicted chan struct{}
	once    sync.Once
	drops   func()
}

// NewQueue returns a queue holding up to size messages.
func (h *Hub) NewQueue(size int) *Queue {
	return &Queue{ch: make(chan Message, size), evicted: make(chan struct{}), drops: h.m.slowDrops.Inc}
}

// Deliver queues m, or evicts the queue's connection when it is full.
func (q *Queue) Deliver(m Message) {
	select {
	case <-q.evicted:
		return
	default:
	}
	select {
	case q.ch <- m:
	default:
		q.Evict()
	}
}

// Evict marks the connection as dropped; the first call counts it.
func (q *Queue) Evict() {
	q.once.Do(func() {
		close(q.evicted)
		if q.drops != nil {
			q.drops()
		}
	})
}

// C yields queued messages.
func (q *Queue) C() <-chan Message { return q.ch }

// Evicted is closed when the connection fell too far behind.
func (q *Queue) Evicted() <-chan struct{} { return q.evicted }

// Len is the number of messages waiting.
func (q *Queue) Len() int { return len(q.ch) }
