package router

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"time"

	"frontdoor/adapters"
	"frontdoor/balancer"
	"frontdoor/internal/reply"
	"frontdoor/internal/streambody"
	"frontdoor/internal/telemetry"
	"frontdoor/router/config"
	"frontdoor/router/reuse"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
)

// commit sends the answer of x.upstream (node, or spill-over when node is
// nil) to the client, and hands it to the flight (followers, write-back)
// when there is one.
func (g *Gateway) commit(ctx *fasthttp.RequestCtx, x *exchange, node *balancer.Node, be adapters.Backend, resp *adapters.UpstreamResponse) {
	setUpstream(&ctx.Response.Header, x.upstream, x.attempts)
	if f := x.flight; f != nil {
		f.SetUpstream(x.upstream, x.attempts)
	}
	if resp.Status >= 400 {
		e := be.MapError(resp.Status, resp.Body)
		resp.Close()
		x.slot.release()
		x.failFlight()
		reply.Error(ctx, e)
		return
	}
	if !resp.Streaming() {
		g.commitJSON(ctx, x, resp)
		return
	}
	g.commitStream(ctx, x, node, resp)
}

// The headers of a relayed stream, canonical already.
var (
	headerCacheControl   = []byte(fasthttp.HeaderCacheControl)
	headerAccelBuffering = []byte("X-Accel-Buffering")
	noCache, no          = []byte("no-cache"), []byte("no")
)

// commitStream relays a streamed answer: the handler returns and the pump
// runs in fasthttp's body writer; the stream's end settles and stores.
func (g *Gateway) commitStream(ctx *fasthttp.RequestCtx, x *exchange, node *balancer.Node, resp *adapters.UpstreamResponse) {
	h := &ctx.Response.Header
	f := x.flight
	first := time.Now()
	ctx.SetStatusCode(resp.Status)
	ctx.SetContentType("text/event-stream")
	h.SetCanonical(headerCacheControl, noCache)
	h.SetCanonical(headerAccelBuffering, no)
	var asm *adapters.Assembler // the whole answer, for the cache
	if f != nil {
		f.StartStream(resp.Status)
		asm = adapters.NewAssembler(x.endpoint)
	}
	handed := x.handOff()
	tenantName := x.tenant.name
	wantUsage := x.req.IncludeUsage
	tap := g.hooks.streamTap(x) // nil: no hook taps this stream (the Responses API taps its own)
	ep := x.endpoint
	id, upstream := x.id, x.upstream
	g.streams.Add(1)
	g.live.add(resp)
	g.metrics.streams.Add(1)
	streambody.Set(ctx, func(w streambody.Writer) {
		// The handler and finish are done with the route to the node: an
		// open stream need not hold it.
		x.upstreamReq, x.tries, x.prefix, x.hints = adapters.UpstreamRequest{}, attempts{}, nil, balancer.Hints{}
		r := pumped{broken: true, cut: reuse.NotStoredCut} // until the pump returns (it may panic)
		defer func() {
			if r := recover(); r != nil {
				g.log.Error("stream pump panicked", "request_id", id, "panic", r)
			}
			g.live.remove(resp)
			resp.Close()
			if node != nil && x.streamEvents > 1 {
				g.pool.ReportTokens(node, x.streamEvents-1, time.Since(first))
			}
			x.slot.release()
			g.metrics.streams.Add(-1)
			g.streams.Done()
			var answer *adapters.Answer
			if asm != nil {
				why := r.cut
				if why == "" {
					var err error
					answer, err = asm.Answer()
					why = reuse.NotStoredReason(err)
				}
				if why != "" {
					g.cache.NotStored(id, upstream, why)
				}
			}
			if answer != nil {
				r.usage, r.usageKnown = answer.Usage, true
			} else if tap != nil {
				if u, known := tap.usage(); known {
					r.usage, r.usageKnown = u, true
				}
			}
			usage := -1
			if r.usageKnown && !r.broken {
				usage = r.usage.TotalTokens
				g.metrics.countTokens(tenantName, "upstream", r.usage.PromptTokens, r.usage.CompletionTokens)
				g.metrics.dash.upstream(upstream, r.usage)
				x.obs.Usage(r.usage)
			}
			handed.done(usage)
			if f != nil {
				f.Finish(answer, r.broken)
			}
		}()
		r = g.pump(w, id, ep, resp, f, asm, wantUsage, tap)
		x.streamEvents = r.events
	})
}

// commitJSON sends a whole (non-streaming) answer and hands it to the
// flight.
func (g *Gateway) commitJSON(ctx *fasthttp.RequestCtx, x *exchange, resp *adapters.UpstreamResponse) {
	f := x.flight
	if resp.Converted {
		g.metrics.badAnswers["sse_converted"].Inc()
		g.upLog.Warn("sse_converted:"+x.upstream, "upstream answered a non-streaming request with an event stream; converted to JSON",
			"node", x.upstream, "request_id", x.id)
	}
	ctx.SetStatusCode(resp.Status)
	ctx.Response.Header.SetContentTypeBytes(resp.ContentType)
	ctx.SetBody(resp.Body)
	g.hooks.answered(x, resp.Body)
	var answer *adapters.Answer
	if f != nil {
		if a, err := adapters.ParseAnswer(x.endpoint, resp.Body); err == nil {
			answer = a
		}
	}
	if answer != nil && answer.Usage.TotalTokens > 0 {
		g.metrics.settle(x, answer.Usage, true)
	} else { // no usage in the answer (a converted stream may have none)
		u, ok := adapters.ParseUsage(resp.Body)
		g.metrics.settle(x, u, ok)
	}
	if f != nil {
		f.FinishJSON(resp.Status, resp.ContentType, resp.Body, answer)
	}
	resp.Close()
	x.slot.release()
}

// errClientGone stops a pump's read of the node once its client is gone.
var errClientGone = errors.New("client gone")

// pumped is what a stream's pump saw.
type pumped struct {
	broken     bool
	cut        string // why the read of the node stopped before its end: reuse.NotStoredCut or NotStoredClientGone
	events     int
	usage      adapters.Usage // from the include_usage chunk
	usageKnown bool
}

// settle charges a non-streaming answer's real usage and counts its tokens.
func (m *gatewayMetrics) settle(x *exchange, u adapters.Usage, known bool) {
	if !known {
		if x.charge != nil {
			x.charge.Settle(-1) // usage unknown: the estimate stands
		}
		return
	}
	if x.charge != nil {
		x.charge.Settle(u.TotalTokens)
	}
	m.countTokens(x.tenant.name, "upstream", u.PromptTokens, u.CompletionTokens)
	m.dash.upstream(x.upstream, u)
	x.obs.Usage(u)
}

// pump copies upstream events to the client as they arrive and publishes
// them to the flight. ep is the stream's endpoint; its events also pass
// through tap, when there is one (the Responses API's: the response id,
// the usage). It flushes before each read of the upstream's socket:
// what one read brought leaves in one chunk and one write, and no event
// waits for the next. When the client goes away the upstream is closed at
// once, unless followers of the flight still read it. It reports whether
// the stream broke.
func (g *Gateway) pump(w streambody.Writer, id string, ep adapters.Endpoint, resp *adapters.UpstreamResponse, f *reuse.Flight, asm *adapters.Assembler, wantUsage bool, tap eventTap) (r pumped) {
	c := &pumpClient{w: w, f: f, aborts: g.metrics.clientAborts, ok: true}
	resp.OnRead(c)
	for ; ; r.events++ {
		if !c.ok && c.alone() {
			r.broken, r.cut = true, reuse.NotStoredClientGone
			return r
		}
		ev, err := resp.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return r
			}
			if !c.ok && c.alone() {
				r.broken, r.cut = true, reuse.NotStoredClientGone
				return r
			}
			g.log.Warn("upstream stream broke", "request_id", id, "error", err.Error())
			g.metrics.streamErrors.Inc()
			e := adapters.UpstreamError("upstream stream ended early: " + err.Error())
			errEP := adapters.EndpointChat
			if ep == adapters.EndpointResponses {
				errEP = adapters.EndpointResponses
			}
			errEvent := adapters.StreamErrorEvent(errEP, e)
			if f != nil {
				f.Publish(errEvent, false)
			}
			if c.ok {
				_, _ = w.Write(errEvent)
				_ = w.Flush()
			}
			r.broken, r.cut = true, reuse.NotStoredCut
			return r
		}
		usageOnly := false
		if tap != nil {
			tap.see(&ev)
		}
		if asm != nil {
			usageOnly = asm.Add(&ev)
		} else if usageOnly = ep != adapters.EndpointResponses && adapters.IsUsageOnly(ev.Data); usageOnly {
			r.usage, r.usageKnown = adapters.ParseUsage(ev.Data)
		}
		if f != nil {
			f.Publish(ev.Raw, usageOnly)
		}
		if c.ok && (!usageOnly || wantUsage) {
			if _, err := w.Write(ev.Raw); err != nil {
				c.gone()
			}
		}
	}
}

// pumpClient is a pump's client: the writer, and whether it still takes
// the stream. Before each read of the node's socket it flushes what the
// last read brought (adapters.ReadHook).
type pumpClient struct {
	w      streambody.Writer
	f      *reuse.Flight
	aborts *metrics.Counter
	ok     bool
}

// BeforeRead flushes what the client has been written, and stops the read
// of the node once the client is gone and no follower reads it either.
func (c *pumpClient) BeforeRead() error {
	if c.ok && c.w.Flush() != nil {
		c.gone()
	}
	if !c.ok && c.alone() {
		return errClientGone // no reader left: stop reading the node
	}
	return nil
}

// gone records that the client went away.
func (c *pumpClient) gone() {
	c.ok = false
	c.aborts.Inc()
}

// alone reports whether no follower of the flight reads the stream.
func (c *pumpClient) alone() bool { return c.f.Alone() }

// follow serves a request from a flight led by an identical one. It
// returns false when the leader got no usable answer, so the caller goes
// upstream itself.
func (g *Gateway) follow(ctx *fasthttp.RequestCtx, x *exchange, f *reuse.Flight) bool {
	head, ok := f.Wait(g.conf().Timeouts.Total.D())
	if !ok {
		return false
	}
	if hit, ok := f.Hit(x.plan); ok {
		g.serveHit(ctx, x, hit)
		return true
	}
	var answer *adapters.Answer
	if !head.Streaming || !x.req.Stream {
		answer, _ = f.Result()
		if answer == nil && x.req.Stream {
			return false // the leader's JSON answer can't be replayed as a stream
		}
	}
	x.setCache(&ctx.Response.Header, reuse.Outcome{Result: reuse.ResultMiss, Reason: reuse.ReasonCoalesced}, "")
	x.entryID = f.EntryID() // the entry that will hold the answer replayed below
	x.upstream = head.Upstream
	setUpstream(&ctx.Response.Header, head.Upstream, 0)
	ctx.Response.Header.Set("X-Coalesced", "true")
	if !head.Streaming {
		if answer == nil {
			ctx.SetStatusCode(head.Status)
			ctx.Response.Header.SetContentTypeBytes(head.ContentType)
			ctx.SetBody(head.Body)
			return true
		}
		g.replay(ctx, x, answer)
		return true
	}
	if !x.req.Stream {
		if answer == nil {
			reply.Error(ctx, adapters.UpstreamError("the shared upstream stream for this request failed"))
			return true
		}
		g.replay(ctx, x, answer)
		return true
	}
	ctx.SetStatusCode(head.Status)
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-cache")
	wantUsage := x.req.IncludeUsage
	following := f.Follow()
	handed := x.handOff()
	streambody.Set(ctx, func(w streambody.Writer) {
		defer handed.done(-1)
		defer following()
		for i := 0; ; i++ {
			ev, ok := f.Next(i)
			if !ok {
				_ = w.Flush()
				return
			}
			if ev.UsageOnly && !wantUsage {
				continue
			}
			if _, err := w.Write(ev.Raw); err != nil {
				return
			}
			if f.CaughtUp(i+1) && w.Flush() != nil {
				return
			}
		}
	})
	return true
}

// finish records metrics and the access log line. Prompts never appear.
func (g *Gateway) finish(ctx *fasthttp.RequestCtx, x *exchange, panicked any) {
	if x.finished {
		return
	}
	x.finished = true
	if x.req != nil {
		defer x.req.Release()
	}
	if r := panicked; r != nil {
		// A bug, not bad input: log it, answer 500, and release below.
		g.log.Error("handler panicked", "request_id", x.id, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		x.streamOwned = false
		ctx.ResetBody()
		reply.Error(ctx, reply.Internal(x.id))
	}
	if !x.streamOwned {
		x.slot.release()
		if x.charge != nil {
			x.charge.Settle(0) // no-op when already settled; else nothing was generated
		}
		x.pass.Release()
	}
	x.status = ctx.Response.StatusCode()
	now := time.Now() // one reading of the clock for the metrics and the log line
	took := now.Sub(x.start)
	g.metrics.observe(x, took)
	x.obs.Finished(telemetry.Outcome{Status: x.status, Attempts: x.attempts, Model: x.model, Upstream: x.upstream,
		Cache: x.cache.Result.Header(), CacheReason: x.cache.Reason.Label()}, x.streamOwned)
	g.cache.Count(x.cache)
	g.metrics.dash.observe(x, now, took)
	if g.conf().Logging.AccessLog {
		model := x.model
		if model == "" && x.req != nil {
			model = x.req.Model
		}
		telemetry.LogAccess(g.log, now, &telemetry.AccessLine{RequestID: x.id, Path: pathString(ctx.Path()), Status: x.status,
			Model: model, Stream: x.req != nil && x.req.Stream, Upstream: x.upstream, Attempts: x.attempts,
			Cache: x.cache.Result.Header(), Duration: took})
	}
}

// pathString is string(path), without a copy for the gateway's own
// routes.
func pathString(path []byte) string {
	for _, r := range config.GatewayRoutes {
		if string(path) == r {
			return r
		}
	}
	return string(path)
}

// liveStreams tracks open upstream streams so a shutdown past its grace
// period can end them.
type liveStreams struct {
	mu sync.Mutex
	m  map[*adapters.UpstreamResponse]struct{}
}

func (l *liveStreams) add(r *adapters.UpstreamResponse) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[*adapters.UpstreamResponse]struct{}{}
	}
	l.m[r] = struct{}{}
	l.mu.Unlock()
}

func (l *liveStreams) remove(r *adapters.UpstreamResponse) {
	l.mu.Lock()
	delete(l.m, r)
	l.mu.Unlock()
}

func (l *liveStreams) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for r := range l.m {
		r.Interrupt()
	}
}
