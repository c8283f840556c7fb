package reuse

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"frontdoor/adapters"
	"frontdoor/cache"
)

// A Flight is one upstream call for a cacheable request, shared by every
// identical request (same exact key) that arrives while it runs. The first
// request (the leader) makes the call; the others (followers) wait for its
// head, then receive the stream's events live or the finished answer. The
// flight stays registered until its answer is written to the cache, so no
// identical request can slip between "answered" and "stored".
//
// The leader's side: SetUpstream, then StartStream, Publish and Finish for
// a stream, or FinishJSON, or Fail. The followers' side: Head, then
// Finished, Result, or Follow with Next and CaughtUp.
type Flight struct {
	c       *Cache
	plan    *Plan
	key     string
	shared  bool   // registered in the group (coalescing on)
	entryID string // the id the answer will be stored under
	epoch   uint64 // the group's epoch when the flight began (see retire)

	ready chan struct{} // closed once head is known
	head  Head

	mu     sync.Mutex
	wake   chan struct{} // closed and replaced when events grow or the flight ends
	events []Event
	done   bool
	broken bool             // the stream ended early or with an error
	answer *adapters.Answer // the assembled answer, when complete and cacheable
	stored bool             // the write-back will store answer: an identical request may be served it

	followers atomic.Int32 // followers still reading the stream
}

// Head is what a flight's followers learn once its upstream answered.
type Head struct {
	Failed      bool // no usable upstream answer: followers go upstream on their own
	Streaming   bool
	Status      int
	ContentType []byte
	Body        []byte // a JSON answer
	Upstream    string
	Attempts    int
}

// Event is one event of a flight's stream.
type Event struct {
	Raw       []byte
	UsageOnly bool // the include_usage chunk: passed on only to who asked
}

// EntryID is the id its answer will be stored under.
func (f *Flight) EntryID() string { return f.entryID }

// SetUpstream names the node (or spill-over) answering, and after how
// many attempts.
func (f *Flight) SetUpstream(name string, attempts int) {
	f.head.Upstream, f.head.Attempts = name, attempts
}

// StartStream tells the followers the answer is a stream of status.
func (f *Flight) StartStream(status int) {
	f.head.Streaming, f.head.Status = true, status
	close(f.ready)
}

// Publish appends one stream event and wakes the followers.
func (f *Flight) Publish(raw []byte, usageOnly bool) {
	f.mu.Lock()
	f.events = append(f.events, Event{Raw: append([]byte(nil), raw...), UsageOnly: usageOnly})
	close(f.wake)
	f.wake = make(chan struct{})
	f.mu.Unlock()
}

// Finish ends a stream: answer is the assembled answer (nil when there is
// none), broken whether the stream ended early. The answer is written
// back when it may be stored, and the flight then retires.
func (f *Flight) Finish(answer *adapters.Answer, broken bool) {
	f.finish(answer, broken)
	go f.c.writeBack(f, answer)
}

// FinishJSON ends a flight answered in one JSON body; answer is its parse
// (nil: not an answer the cache can hold).
func (f *Flight) FinishJSON(status int, contentType, body []byte, answer *adapters.Answer) {
	f.head.Status, f.head.ContentType, f.head.Body = status, append([]byte(nil), contentType...), append([]byte(nil), body...)
	f.finish(answer, answer == nil)
	close(f.ready)
	go f.c.writeBack(f, answer)
}

// Fail tells the followers the flight got no answer (they go upstream on
// their own) and retires it.
func (f *Flight) Fail() {
	f.head.Failed = true
	close(f.ready)
	f.c.flights.leave(f)
}

func (f *Flight) finish(answer *adapters.Answer, broken bool) {
	stored := f.c.Storable(f.plan, answer)
	f.mu.Lock()
	f.done, f.broken, f.answer, f.stored = true, broken, answer, stored && answer != nil
	close(f.wake)
	f.mu.Unlock()
}

// Wait waits up to timeout for the flight's head; ok is false when it
// did not come, or the flight failed.
func (f *Flight) Wait(timeout time.Duration) (h Head, ok bool) {
	select {
	case <-f.ready:
	case <-time.After(timeout):
		return h, false
	}
	return f.head, !f.head.Failed
}

// Follow counts a follower reading the stream until the returned func is
// called.
func (f *Flight) Follow() (done func()) {
	f.followers.Add(1)
	return func() { f.followers.Add(-1) }
}

// Alone reports whether no follower reads the stream (f may be nil).
func (f *Flight) Alone() bool { return f == nil || f.followers.Load() == 0 }

// Next returns event i, or waits for it. ok is false when the flight ended
// before event i.
func (f *Flight) Next(i int) (ev Event, ok bool) {
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

// Result waits for the end of the flight and returns its answer.
func (f *Flight) Result() (answer *adapters.Answer, broken bool) {
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

// Finished returns the answer if the flight has already ended with one
// its write-back will store.
func (f *Flight) Finished() *adapters.Answer {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done && f.stored {
		return f.answer
	}
	return nil
}

// endedUnstored reports whether the flight has ended with no answer that
// its write-back will store.
func (f *Flight) endedUnstored() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.done && !f.stored
}

// CaughtUp reports whether event i is the latest one so far.
func (f *Flight) CaughtUp(i int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return i >= len(f.events)
}

// flightGroup holds the flights in progress by exact key.
type flightGroup struct {
	mu    sync.Mutex
	m     map[string]*Flight
	epoch atomic.Uint64 // advanced by every deletion from the cache, under mu
}

func (g *flightGroup) newFlight(c *Cache, p *Plan, shared bool) *Flight {
	return &Flight{c: c, plan: p, key: p.keys.Exact, shared: shared, entryID: cache.NewEntryID(), epoch: g.epoch.Load(),
		ready: make(chan struct{}), wake: make(chan struct{})}
}

// join returns the flight of p's key and whether the caller leads it.
func (g *flightGroup) join(c *Cache, p *Plan) (*Flight, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f, ok := g.m[p.keys.Exact]; ok {
		if !f.endedUnstored() {
			return f, false
		}
		// Its answer is not stored (a tool call with cache_tool_calls off,
		// a broken stream): following it now would serve that answer as if
		// cached. The caller goes upstream on its own.
		return g.newFlight(c, p, false), true
	}
	if g.m == nil {
		g.m = map[string]*Flight{}
	}
	f := g.newFlight(c, p, true)
	g.m[p.keys.Exact] = f
	return f, true
}

// retire is called before entries are deleted from the cache (an admin
// delete or purge). The flights in progress are unregistered, so that no
// later request is answered from one of them (a finished flight answers
// identical requests until its write-back is done), and their answers are
// not written back (see stale): an answer produced across a deletion is
// not cached. It is coarse, every flight of every namespace, because
// deletions are rare and the price is one more upstream call for a request
// identical to one in flight.
func (g *flightGroup) retire() {
	g.mu.Lock()
	g.epoch.Add(1)
	clear(g.m)
	g.mu.Unlock()
}

// stale reports whether a deletion from the cache came after f began.
func (g *flightGroup) stale(f *Flight) bool { return f.epoch != g.epoch.Load() }

// peek returns the flight for key, if one is registered.
func (g *flightGroup) peek(key string) *Flight {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.m[key]
}

// finishedByEntry returns the answer of a finished flight whose answer
// will be stored under entry id, or nil.
func (g *flightGroup) finishedByEntry(id string) *adapters.Answer {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, f := range g.m {
		if f.entryID == id {
			return f.Finished()
		}
	}
	return nil
}

// leave unregisters a finished flight.
func (g *flightGroup) leave(f *Flight) {
	if !f.shared {
		return
	}
	g.mu.Lock()
	if g.m[f.key] == f {
		delete(g.m, f.key)
	}
	g.mu.Unlock()
}

// writeBack hands a finished answer to the backend's write queue; the
// flight is retired once the answer is stored or dropped. It runs after the
// client has its answer.
func (c *Cache) writeBack(f *Flight, a *adapters.Answer) {
	p := f.plan
	done := func(w *cache.Write) {
		c.flights.leave(f)
		if p.promote != nil {
			c.writtenBack(p.promote, w)
		}
	}
	if c.flights.stale(f) {
		done(nil)
		return
	}
	w, ok := c.cacheWrite(f.entryID, p, a)
	if !ok {
		done(nil)
		return
	}
	c.backend.Enqueue(w, func(err error) {
		if err != nil {
			done(nil)
		} else {
			done(&w)
		}
	})
}

// Storable reports whether the answer a to a request of plan p may be
// stored (and so served to an identical request before it is).
func (c *Cache) Storable(p *Plan, a *adapters.Answer) bool {
	return a != nil && p != nil && p.store && (len(a.ToolCalls) == 0 || c.conf().Eligibility.CacheToolCalls)
}

// cacheWrite builds the write for an answer, embedding the query when the
// lookup did not. ok is false when there is nothing to store.
func (c *Cache) cacheWrite(id string, p *Plan, a *adapters.Answer) (w cache.Write, ok bool) {
	if !c.Storable(p, a) {
		return w, false
	}
	vec := p.vec
	if p.semantic && vec == nil {
		vec, _ = c.backend.Embed(context.Background(), p.keys.Query)
	}
	e := &cache.Entry{ID: id, Namespace: p.namespace, Model: a.Model, Endpoint: p.endpoint,
		Content: a.Content, Reasoning: a.Reasoning, ToolCalls: a.ToolCalls, Finish: a.Finish,
		Usage:   cache.Usage{PromptTokens: a.Usage.PromptTokens, CompletionTokens: a.Usage.CompletionTokens, TotalTokens: a.Usage.TotalTokens},
		Created: time.Now(), ExactKey: p.keys.Exact, Tag: p.tag, Curated: p.curated}
	if e.Model == "" {
		e.Model = p.model
	}
	if !c.conf().Exact.Enabled {
		e.ExactKey = ""
	}
	if p.semantic && vec != nil {
		e.Query, e.Scope = p.keys.Query, p.keys.Scope
	} else {
		vec = nil
	}
	if e.ExactKey == "" && vec == nil {
		return w, false
	}
	w = cache.Write{Entry: e, Vec: vec, TTL: p.ttl}
	if vec != nil {
		w.Query = p.vq // the lookup's (a store uses it only for this very vec)
	}
	return w, true
}

// Why a stream's answer was not stored, for
// frontdoor_cache_writes_dropped_total{reason}: the node reported an error
// in it, it ended without [DONE] or a finish_reason, reading it failed
// (idle, total, the connection), or every reader left and so the gateway
// stopped reading.
const (
	NotStoredError      = "stream_error"
	NotStoredIncomplete = "stream_incomplete"
	NotStoredCut        = "stream_cut"
	NotStoredClientGone = "client_gone"
)

var notStoredReasons = []string{NotStoredError, NotStoredIncomplete, NotStoredCut, NotStoredClientGone}

// NotStoredReason names an Assembler's refusal; "" when there is none, or
// when it is a policy (several choices) rather than a fault.
func NotStoredReason(err error) string {
	switch {
	case errors.Is(err, adapters.ErrStreamError):
		return NotStoredError
	case errors.Is(err, adapters.ErrStreamIncomplete):
		return NotStoredIncomplete
	}
	return ""
}

// NotStored counts a streamed answer of request id from node that was
// headed for the cache and is not stored, and logs it. The cache is doing
// its job, so the line is DEBUG when the fault is loud already (a cut
// stream has its "upstream stream broke" WARN, a client gone is a
// client_aborts_total); a node that put an error in its stream or ended it
// without [DONE] is an upstream fault nothing else reports, so that is a
// WARN naming the node, at most one per node and reason every 10 s.
func (c *Cache) NotStored(id, node, why string) {
	c.m.notStored[why].Inc()
	switch why {
	case NotStoredError, NotStoredIncomplete:
		c.warn.Warn(why+":"+node, "upstream stream not clean; its answer is not cached", "reason", why, "node", node, "request_id", id)
	default:
		if c.log.Enabled(context.Background(), slog.LevelDebug) {
			c.log.Debug("cache: streamed answer not stored", "reason", why, "node", node, "request_id", id)
		}
	}
}
