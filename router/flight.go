package router

import (
	"sync"
	"sync/atomic"

	"frontdoor/adapters"
	"frontdoor/cache"
)

// A flight is one upstream call for a cacheable request, shared by every
// identical request (same exact key) that arrives while it runs. The first
// request (the leader) makes the call; the others (followers) wait for its
// head, then receive the stream's events live or the finished answer. The
// flight stays registered until its answer is written to the cache, so no
// identical request can slip between "answered" and "stored".
type flight struct {
	key     string
	shared  bool   // registered in the group (coalescing on)
	entryID string // the id the answer will be stored under
	epoch   uint64 // the group's epoch when the flight began (see invalidate)

	ready chan struct{} // closed once the head outcome below is known

	// Head outcome, set before ready is closed.
	failed      bool // no usable upstream answer: followers go upstream on their own
	streaming   bool
	status      int
	contentType []byte
	body        []byte // non-streaming answer
	upstream    string
	attempts    int

	mu     sync.Mutex
	wake   chan struct{} // closed and replaced when events grow or the flight ends
	events []flightEvent
	done   bool
	broken bool             // the stream ended early or with an error
	answer *adapters.Answer // the assembled answer, when complete and cacheable
	stored bool             // the write-back will store answer: an identical request may be served it

	followers atomic.Int32 // followers still reading the stream
}

type flightEvent struct {
	raw       []byte
	usageOnly bool
}

func newFlight(key string, shared bool) *flight {
	return &flight{key: key, shared: shared, entryID: cache.NewEntryID(), ready: make(chan struct{}), wake: make(chan struct{})}
}

// publish appends one stream event and wakes the followers.
func (f *flight) publish(raw []byte, usageOnly bool) {
	f.mu.Lock()
	f.events = append(f.events, flightEvent{raw: append([]byte(nil), raw...), usageOnly: usageOnly})
	close(f.wake)
	f.wake = make(chan struct{})
	f.mu.Unlock()
}

// finish marks the flight complete; answer is nil when it is not cacheable.
func (f *flight) finish(answer *adapters.Answer, broken, stored bool) {
	f.mu.Lock()
	f.done, f.broken, f.answer, f.stored = true, broken, answer, stored && answer != nil
	close(f.wake)
	f.mu.Unlock()
}

// next returns event i, or waits for it. ok is false when the flight ended
// before event i.
func (f *flight) next(i int) (ev flightEvent, ok bool) {
	for {
		f.mu.Lock()
		if i < len(f.events) {
			ev = f.events[i]
			f.mu.Unlock()
			return ev, true
		}
		if f.done {
			f.mu.Unlock()
			return ev, false
		}
		wake := f.wake
		f.mu.Unlock()
		<-wake
	}
}

// result waits for the end of the flight and returns its answer.
func (f *flight) result() (answer *adapters.Answer, broken bool) {
	for {
		f.mu.Lock()
		if f.done {
			defer f.mu.Unlock()
			return f.answer, f.broken
		}
		wake := f.wake
		f.mu.Unlock()
		<-wake
	}
}

// finished returns the answer if the flight has already ended with one.
func (f *flight) finished() *adapters.Answer {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done && f.stored {
		return f.answer
	}
	return nil
}

// endedUnstored reports whether the flight has ended with no answer that
// its write-back will store.
func (f *flight) endedUnstored() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.done && !f.stored
}

// caughtUp reports whether event i is the latest one so far.
func (f *flight) caughtUp(i int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return i >= len(f.events)
}

// flightGroup holds the flights in progress by exact key.
type flightGroup struct {
	mu    sync.Mutex
	m     map[string]*flight
	epoch atomic.Uint64 // advanced by every deletion from the cache, under mu
}

// join returns the flight for key and whether the caller leads it.
func (g *flightGroup) join(key string) (*flight, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f, ok := g.m[key]; ok {
		if !f.endedUnstored() {
			return f, false
		}
		// Its answer is not stored (a tool call with cache_tool_calls off,
		// a broken stream): following it now would serve that answer as if
		// cached. The caller goes upstream on its own.
		return g.solo(key), true
	}
	if g.m == nil {
		g.m = map[string]*flight{}
	}
	f := newFlight(key, true)
	f.epoch = g.epoch.Load()
	g.m[key] = f
	return f, true
}

// solo returns a flight for key that no identical request joins.
func (g *flightGroup) solo(key string) *flight {
	f := newFlight(key, false)
	f.epoch = g.epoch.Load()
	return f
}

// invalidate is called before entries are deleted from the cache (an admin
// delete or purge). The flights in progress are unregistered, so that no
// later request is answered from one of them (a finished flight answers
// identical requests until its write-back is done), and their answers are
// not written back (see stale): an answer produced across a deletion is
// not cached. It is coarse, every flight of every namespace, because
// deletions are rare and the price is one more upstream call for a request
// identical to one in flight.
func (g *flightGroup) invalidate() {
	g.mu.Lock()
	g.epoch.Add(1)
	clear(g.m)
	g.mu.Unlock()
}

// stale reports whether a deletion from the cache came after f began.
func (g *flightGroup) stale(f *flight) bool { return f.epoch != g.epoch.Load() }

// peek returns the flight for key, if one is registered.
func (g *flightGroup) peek(key string) *flight {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.m[key]
}

// finishedByEntry returns the answer of a finished flight whose answer
// will be stored under entry id, or nil: the entry of an answer served
// from a flight may not be stored yet.
func (g *flightGroup) finishedByEntry(id string) *adapters.Answer {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, f := range g.m {
		if f.entryID == id {
			return f.finished()
		}
	}
	return nil
}

// leave unregisters a finished flight.
func (g *flightGroup) leave(f *flight) {
	if !f.shared {
		return
	}
	g.mu.Lock()
	if g.m[f.key] == f {
		delete(g.m, f.key)
	}
	g.mu.Unlock()
}
