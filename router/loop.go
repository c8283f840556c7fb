package router

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"frontdoor/adapters"
)

// The loop engine (server.engine: loop). Whole inference requests are
// served by adapters.LoopServer's event loops: prepare, the upstream
// exchange and commit run on the loop's thread. What may block (following
// a coalesced flight, retries with their backoff, spill-over, nodes behind
// TLS) moves to a goroutine with LoopExchange.Go, and every other
// connection (streams, GETs, admin) is served by fasthttp. Configs whose
// checks may block (see loopServes) are served by fasthttp alone.

// loopServes reports whether the loops serve under cfg: when no step of a
// request's checks can block or take long (no Redis, no admission waits, no
// semantic lookup, whose embedding and vector search can take milliseconds
// that every other connection of a loop would wait). Otherwise each request
// would hop to a goroutine and back, which costs more than fasthttp's
// goroutine per connection (docs/BENCHMARKS.md), and fasthttp serves.
func loopServes(cfg Config) bool {
	c := cfg.Cache
	return (c.Backend == "off" || (c.Backend == "memory" && !c.Semantic.Enabled)) &&
		cfg.Admission.Backend == "local" && cfg.Admission.MaxWait.D() == 0
}

func (g *Gateway) buildLoop() error {
	if g.cfg.Server.Engine != "loop" {
		return nil
	}
	if !loopServes(g.cfg) {
		g.log.Info("server.engine loop: a request's checks may block or take long under this config (Redis, admission waits or semantic cache); fasthttp serves every request")
		return nil
	}
	g.loopTargets = map[string]*adapters.LoopTarget{}
	for name, be := range g.backends {
		if hb, ok := be.(*adapters.HTTPBackend); ok {
			if t := hb.LoopTarget(); t != nil {
				g.loopTargets[name] = t
			}
		}
	}
	g.handoff = newConnQueue()
	srv, err := adapters.NewLoopServer(adapters.LoopConfig{
		Loops:         g.cfg.Server.Loops,
		ClientTimeout: g.cfg.Timeouts.Client.D(),
		MaxBodyBytes:  int(g.cfg.Limits.MaxBodyBytes),
		Paths:         []string{"/v1/chat/completions", "/v1/completions"},
		ServerName:    "frontdoor",
		PlainSyscalls: g.cfg.Server.IOUring == "off",
	}, g.serveLoop, func(c net.Conn) {
		g.metrics.loopHandoffs.Inc()
		g.handoff.push(c)
	})
	if err != nil {
		return err
	}
	g.loop = srv
	if srv.IOBatching() {
		g.log.Info("server.engine loop: socket reads and writes are batched through io_uring")
	} else {
		g.log.Info("server.engine loop: one system call per socket read or write", "io_uring", g.cfg.Server.IOUring)
	}
	return nil
}

// serveLoop serves one whole POST to an inference path, on a loop.
func (g *Gateway) serveLoop(ex *adapters.LoopExchange) {
	ctx := ex.Ctx
	ep := adapters.EndpointChat
	if string(ctx.Path()) == "/v1/completions" {
		ep = adapters.EndpointCompletion
	}
	g.metrics.loopRequests.Inc()
	x := &exchange{start: time.Now(), id: requestID(ctx), endpoint: ep}
	defer g.loopRecover(ex, x)
	ur, leader := g.prepare(ctx, x)
	g.afterPrepare(ex, x, ur, leader)
}

// afterPrepare goes on from prepare, on the loop.
func (g *Gateway) afterPrepare(ex *adapters.LoopExchange, x *exchange, ur *adapters.UpstreamRequest, leader *flight) {
	ctx := ex.Ctx
	switch {
	case leader != nil:
		ex.Go(func() {
			defer func() { g.finish(ctx, x, recover()) }()
			if ur := g.rejoin(ctx, x, leader); ur != nil {
				g.forward(ctx, x, ur)
			}
		})
	case ur == nil:
		g.finish(ctx, x, nil)
		ex.Reply()
	default:
		g.forwardLoop(ex, x, ur)
	}
}

// forwardLoop makes the first attempt from the loop; anything past it
// (retries and their backoff, spill-over, the 503) runs on a goroutine.
func (g *Gateway) forwardLoop(ex *adapters.LoopExchange, x *exchange, ur *adapters.UpstreamRequest) {
	ctx := ex.Ctx
	st := g.candidates(x)
	if g.cfg.Balancer.Queue.MaxWait.D() > 0 && !anyFree(st.cands) {
		ex.Go(func() {
			defer func() { g.finish(ctx, x, recover()) }()
			g.forward(ctx, x, ur)
		})
		return
	}
	n := g.nextNode(x, st)
	if n == nil {
		g.forwardRest(ex, x, ur, st)
		return
	}
	t := g.loopTargets[n.Name()]
	if t == nil { // a node the loops cannot speak to: give its slot back for the goroutine
		x.slot.release()
		st.next--
		g.forwardRest(ex, x, ur, st)
		return
	}
	x.attempts++
	be := g.backends[n.Name()]
	ex.Send(t, ur, func(resp *adapters.UpstreamResponse, err error) {
		if x.finished { // a panic already answered it
			return
		}
		defer g.loopRecover(ex, x)
		if !g.answered(x, n, be, st, resp, err, time.Time{}) {
			g.forwardRest(ex, x, ur, st)
			return
		}
		g.commit(ctx, x, n, be, resp)
		g.finish(ctx, x, nil)
		ex.Reply()
	})
}

// forwardRest goes on from st on a goroutine: retries with their backoff,
// then spill-over or the error.
func (g *Gateway) forwardRest(ex *adapters.LoopExchange, x *exchange, ur *adapters.UpstreamRequest, st *attempts) {
	ex.Go(func() {
		defer func() { g.finish(ex.Ctx, x, recover()) }()
		g.forwardFrom(ex.Ctx, x, ur, st)
	})
}

// loopRecover turns a panic on the loop into a 500 for its request, with
// everything the request held released; the loop goes on.
func (g *Gateway) loopRecover(ex *adapters.LoopExchange, x *exchange) {
	if r := recover(); r != nil {
		g.finish(ex.Ctx, x, r)
		ex.Reply()
	}
}

// connQueue is the listener the fasthttp server serves the connections
// the loops hand over from; Close (by the server's shutdown) refuses more.
type connQueue struct {
	ch     chan net.Conn
	closed chan struct{}
	once   sync.Once
	addr   net.Addr
}

func newConnQueue() *connQueue {
	return &connQueue{ch: make(chan net.Conn), closed: make(chan struct{}), addr: &net.TCPAddr{}}
}

func (q *connQueue) push(c net.Conn) {
	select {
	case q.ch <- c:
	case <-q.closed:
		_ = c.Close()
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.closed:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.closed) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }

// serveLoopEngine runs the loops on ln and fasthttp on what they hand over.
func (g *Gateway) serveLoopEngine(ln net.Listener) error {
	if _, ok := ln.(*net.TCPListener); !ok { // the loops need a socket of their own
		return g.server.Serve(adapters.DeferredListener{Listener: ln})
	}
	q := g.handoff
	q.addr = ln.Addr()
	errc := make(chan error, 1)
	go func() { errc <- g.server.Serve(q) }()
	err := g.loop.Serve(ln)
	if ferr := <-errc; err == nil && !errors.Is(ferr, net.ErrClosed) {
		err = ferr
	}
	return err
}

// shutdownLoopEngine stops the loops and the fasthttp server side by side.
func (g *Gateway) shutdownLoopEngine(ctx context.Context) error {
	var loopErr error
	done := make(chan struct{})
	go func() { defer close(done); loopErr = g.loop.Shutdown(ctx) }()
	err := g.server.ShutdownWithContext(ctx)
	g.handoff.Close()
	<-done
	return errors.Join(err, loopErr)
}
