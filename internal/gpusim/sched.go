package gpusim

import (
	"container/list"
	"sync"
	"sync/atomic"
)

// ticket is a request's place in the scheduler: granted once it holds a
// running slot. ready is closed when a queued ticket is granted.
type ticket struct {
	ready   chan struct{}
	elem    *list.Element
	granted bool // guarded by scheduler.mu
}

// grantedTicket is shared by every request that got a slot without queueing;
// it is never mutated.
var grantedTicket = func() *ticket {
	t := &ticket{ready: make(chan struct{}), granted: true}
	close(t.ready)
	return t
}()

// scheduler hands out MaxNumSeqs running slots; the rest wait FIFO, as in
// vLLM's scheduler. Counts are mirrored in atomics for lock-free metrics.
type scheduler struct {
	mu         sync.Mutex
	maxRunning int
	maxWaiting int // 0 = unlimited
	queue      list.List
	nRunning   int

	running   atomic.Int64
	waiting   atomic.Int64
	highWater atomic.Int64
}

func newScheduler(maxRunning, maxWaiting int) *scheduler {
	return &scheduler{maxRunning: maxRunning, maxWaiting: maxWaiting}
}

// enqueue admits a request: it returns a granted ticket when a slot is free
// and nobody waits, a queued ticket otherwise, or ok=false when the waiting
// queue is full.
func (s *scheduler) enqueue() (t *ticket, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nRunning < s.maxRunning && s.queue.Len() == 0 {
		s.nRunning++
		s.publishRunning()
		return grantedTicket, true
	}
	if s.maxWaiting > 0 && s.queue.Len() >= s.maxWaiting {
		return nil, false
	}
	t = &ticket{ready: make(chan struct{})}
	t.elem = s.queue.PushBack(t)
	s.waiting.Store(int64(s.queue.Len()))
	return t, true
}

// cancel withdraws t: a queued ticket leaves the queue; a granted one gives
// its slot back.
func (s *scheduler) cancel(t *ticket) {
	s.mu.Lock()
	if t.granted {
		s.mu.Unlock()
		s.release()
		return
	}
	s.queue.Remove(t.elem)
	t.elem = nil
	s.waiting.Store(int64(s.queue.Len()))
	s.mu.Unlock()
}

// release frees a running slot, handing it to the head of the queue if any.
func (s *scheduler) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if front := s.queue.Front(); front != nil {
		t := s.queue.Remove(front).(*ticket)
		t.elem = nil
		t.granted = true
		close(t.ready)
		s.waiting.Store(int64(s.queue.Len()))
		return
	}
	s.nRunning--
	s.publishRunning()
}

func (s *scheduler) publishRunning() {
	s.running.Store(int64(s.nRunning))
	if int64(s.nRunning) > s.highWater.Load() {
		s.highWater.Store(int64(s.nRunning))
	}
}
