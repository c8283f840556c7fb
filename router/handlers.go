package router

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"frontdoor/adapters"
	"frontdoor/balancer"
)

func (g *Gateway) handle(ctx *fasthttp.RequestCtx) {
	switch string(ctx.Path()) {
	case "/v1/chat/completions":
		g.serveInference(ctx, adapters.EndpointChat)
	case "/v1/completions":
		g.serveInference(ctx, adapters.EndpointCompletion)
	case "/v1/models":
		if g.onlyMethod(ctx, fasthttp.MethodGet) {
			ctx.SetContentType("application/json")
			ctx.SetBody(g.models)
		}
	case "/healthz":
		if g.onlyMethod(ctx, fasthttp.MethodGet) {
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"status":"ok"}`)
		}
	case "/readyz":
		if g.onlyMethod(ctx, fasthttp.MethodGet) {
			g.serveReady(ctx)
		}
	case "/metrics":
		if g.onlyMethod(ctx, fasthttp.MethodGet) {
			ctx.SetContentType("text/plain; version=0.0.4")
			g.metrics.write(ctx)
		}
	default:
		g.writeError(ctx, &adapters.APIError{Status: 404, Type: adapters.TypeNotFound, Code: "unknown_url",
			Message: "unknown path " + strconv.Quote(string(ctx.Path()))})
	}
}

func (g *Gateway) onlyMethod(ctx *fasthttp.RequestCtx, method string) bool {
	if string(ctx.Method()) == method || (method == fasthttp.MethodGet && ctx.IsHead()) {
		return true
	}
	ctx.Response.Header.Set(fasthttp.HeaderAllow, method)
	g.writeError(ctx, &adapters.APIError{Status: 405, Type: adapters.TypeInvalidRequest, Code: "method_not_allowed",
		Message: "method " + string(ctx.Method()) + " is not allowed on " + string(ctx.Path()) + "; use " + method})
	return false
}

// handleTransportError answers requests fasthttp could not read, such as an
// oversize body, with the OpenAI envelope.
func (g *Gateway) handleTransportError(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		g.writeError(ctx, &adapters.APIError{Status: 413, Type: adapters.TypeInvalidRequest, Code: "request_too_large",
			Message: "request body exceeds limits.max_body_bytes (" + strconv.FormatInt(int64(g.cfg.Limits.MaxBodyBytes), 10) + " bytes)"})
		ctx.SetConnectionClose()
		return
	}
	g.writeError(ctx, adapters.BadRequest("", "malformed HTTP request"))
	ctx.SetConnectionClose()
}

func (g *Gateway) serveReady(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("application/json")
	if g.stopping.Load() {
		ctx.SetStatusCode(503)
		ctx.SetBodyString(`{"status":"stopping"}`)
		return
	}
	if g.pool.Ready() {
		ctx.SetBodyString(`{"status":"ready"}`)
		return
	}
	ctx.SetStatusCode(503)
	ctx.SetBodyString(`{"status":"no usable node"}`)
}

func (g *Gateway) writeError(ctx *fasthttp.RequestCtx, e *adapters.APIError) {
	ctx.Response.ResetBody()
	ctx.SetStatusCode(e.Status)
	ctx.SetContentType("application/json")
	if e.RetryAfter > 0 {
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, strconv.Itoa(e.RetryAfter))
	}
	ctx.Response.SetBodyRaw(e.AppendJSON(nil))
}

// requestID takes a sane client X-Request-Id or makes one.
func requestID(ctx *fasthttp.RequestCtx) string {
	if id := ctx.Request.Header.Peek("X-Request-Id"); len(id) > 0 && len(id) <= 128 && printable(id) {
		return string(id)
	}
	var b [8]byte
	v := rand.Uint64()
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return hex.EncodeToString(b[:])
}

func printable(b []byte) bool {
	for _, c := range b {
		if c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

func isJSON(ct []byte) bool {
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = bytes.TrimSpace(ct)
	return bytes.EqualFold(ct, []byte("application/json"))
}

// exchange is one inference request as it moves through the gateway.
type exchange struct {
	start    time.Time
	id       string
	endpoint adapters.Endpoint
	req      *adapters.Request
	model    string // after alias resolution
	upstream string
	attempts int
	status   int
}

func (g *Gateway) serveInference(ctx *fasthttp.RequestCtx, ep adapters.Endpoint) {
	x := exchange{start: time.Now(), id: requestID(ctx), endpoint: ep}
	ctx.Response.Header.Set("X-Request-Id", x.id)
	defer func() { g.finish(ctx, &x) }()
	if !ctx.IsPost() {
		g.onlyMethod(ctx, fasthttp.MethodPost)
		return
	}
	if !isJSON(ctx.Request.Header.ContentType()) {
		g.writeError(ctx, &adapters.APIError{Status: 415, Type: adapters.TypeInvalidRequest, Code: "unsupported_media_type",
			Message: "Content-Type must be application/json, got " + strconv.Quote(string(ctx.Request.Header.ContentType()))})
		return
	}
	req, apiErr := adapters.ParseRequest(ep, ctx.PostBody())
	if apiErr != nil {
		g.writeError(ctx, apiErr)
		return
	}
	defer req.Release()
	x.req = req
	model, ok := g.pool.Resolve(req.Model, x.id)
	if !ok {
		g.writeError(ctx, adapters.NotFound("model", "The model `"+req.Model+"` does not exist"))
		return
	}
	x.model = model
	body := req.Body
	if model != req.Model {
		body = rewriteModel(req.Root(), model)
	}
	g.forward(ctx, &x, &adapters.UpstreamRequest{Endpoint: ep, Body: body, Stream: req.Stream, RequestID: x.id})
}

// rewriteModel re-encodes the request with another model name. Only alias
// resolution pays for this; plain requests are forwarded byte for byte.
func rewriteModel(root *fastjson.Value, model string) []byte {
	var arena fastjson.Arena
	root.Set("model", arena.NewString(model))
	return root.MarshalTo(nil)
}

// forward tries the candidate nodes in order until one answers. Failures
// before the first byte move on to the next (different) node.
func (g *Gateway) forward(ctx *fasthttp.RequestCtx, x *exchange, ur *adapters.UpstreamRequest) {
	cands, _ := g.pool.Candidates(x.model)
	maxAttempts := 1 + g.cfg.Balancer.Retries
	var lastErr *adapters.APIError
	for _, n := range cands {
		if x.attempts >= maxAttempts {
			break
		}
		if !n.TryAcquire() {
			continue
		}
		if x.attempts > 0 {
			g.metrics.retries.Inc()
			time.Sleep(g.backoff(x.attempts))
		}
		x.attempts++
		be := g.backends[n.Name()]
		sent := time.Now()
		resp, err := be.Send(context.Background(), ur)
		if err != nil {
			n.Release()
			g.pool.Report(n, balancer.OutcomeFailure, 0)
			lastErr = sendError(n.Name(), err)
			g.log.Warn("upstream attempt failed", "request_id", x.id, "node", n.Name(), "error", err.Error())
			continue
		}
		if adapters.RetryableStatus(resp.Status) {
			lastErr = be.MapError(resp.Status, resp.Body)
			resp.Close()
			n.Release()
			g.pool.Report(n, balancer.OutcomeFailure, 0)
			g.log.Warn("upstream attempt refused", "request_id", x.id, "node", n.Name(), "status", resp.Status)
			continue
		}
		g.pool.Report(n, balancer.OutcomeSuccess, time.Since(sent))
		x.upstream = n.Name()
		g.commit(ctx, x, n, be, resp)
		return
	}
	if lastErr == nil {
		lastErr = adapters.Unavailable("all nodes serving "+x.model+" are at capacity; retry shortly", 1)
		if !g.pool.AnyUsable(x.model) {
			lastErr = adapters.Unavailable("no healthy node serves "+x.model+" right now; retry shortly", 1)
		}
	}
	g.writeError(ctx, lastErr)
}

func (g *Gateway) backoff(attempt int) time.Duration {
	base, maxD := g.cfg.Balancer.Backoff.Base.D(), g.cfg.Balancer.Backoff.Max.D()
	if base <= 0 {
		return 0
	}
	d := base << (attempt - 1)
	if d > maxD || d <= 0 {
		d = maxD
	}
	return d/2 + rand.N(d/2+1) // equal jitter
}

func sendError(node string, err error) *adapters.APIError {
	if errors.Is(err, adapters.ErrFirstByteTimeout) {
		return adapters.UpstreamTimeout("upstream " + node + " did not answer in time")
	}
	return adapters.UpstreamError("upstream " + node + " failed: " + err.Error())
}

// commit sends the chosen upstream's answer to the client.
func (g *Gateway) commit(ctx *fasthttp.RequestCtx, x *exchange, n *balancer.Node, be adapters.Backend, resp *adapters.UpstreamResponse) {
	h := &ctx.Response.Header
	h.Set("X-Upstream", n.Name())
	h.Set("X-Upstream-Attempts", strconv.Itoa(x.attempts))
	if resp.Status >= 400 {
		e := be.MapError(resp.Status, resp.Body)
		resp.Close()
		n.Release()
		g.writeError(ctx, e)
		return
	}
	if !resp.Streaming() {
		ctx.SetStatusCode(resp.Status)
		ctx.Response.Header.SetContentTypeBytes(resp.ContentType)
		ctx.SetBody(resp.Body)
		resp.Close()
		n.Release()
		return
	}
	ctx.SetStatusCode(resp.Status)
	ctx.SetContentType("text/event-stream")
	h.Set(fasthttp.HeaderCacheControl, "no-cache")
	h.Set("X-Accel-Buffering", "no")
	g.streams.Add(1)
	g.live.add(resp)
	g.metrics.streams.Add(1)
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer func() {
			if r := recover(); r != nil {
				g.log.Error("stream pump panicked", "request_id", x.id, "panic", r)
			}
			g.live.remove(resp)
			resp.Close()
			n.Release()
			g.metrics.streams.Add(-1)
			g.streams.Done()
		}()
		g.pump(w, x.id, resp)
	})
}

// pump copies upstream events to the client as they arrive, flushing
// whenever nothing more is buffered. It stops when the client goes away,
// which closes the upstream connection at once.
func (g *Gateway) pump(w *bufio.Writer, id string, resp *adapters.UpstreamResponse) {
	for {
		ev, err := resp.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				g.log.Warn("upstream stream broke", "request_id", id, "error", err.Error())
				g.metrics.streamErrors.Inc()
				e := adapters.UpstreamError("upstream stream ended early: " + err.Error())
				_, _ = w.Write(adapters.AppendSSEData(nil, e.AppendJSON(nil)))
				_ = w.Flush()
			}
			return
		}
		if _, err := w.Write(ev.Raw); err != nil {
			g.metrics.clientAborts.Inc()
			return
		}
		if !resp.Buffered() {
			if err := w.Flush(); err != nil {
				g.metrics.clientAborts.Inc()
				return
			}
		}
	}
}

// finish records metrics and the access log line. Prompts never appear.
func (g *Gateway) finish(ctx *fasthttp.RequestCtx, x *exchange) {
	x.status = ctx.Response.StatusCode()
	g.metrics.observe(x)
	if g.cfg.Logging.AccessLog {
		model := x.model
		if model == "" && x.req != nil {
			model = x.req.Model
		}
		g.log.LogAttrs(context.Background(), slog.LevelInfo, "request",
			slog.String("request_id", x.id), slog.String("path", string(ctx.Path())), slog.Int("status", x.status),
			slog.String("model", model), slog.Bool("stream", x.req != nil && x.req.Stream),
			slog.String("upstream", x.upstream), slog.Int("attempts", x.attempts),
			slog.Float64("duration_ms", float64(time.Since(x.start).Microseconds())/1000))
	}
}

func (g *Gateway) modelsBody() []byte {
	served, aliases := g.pool.Models()
	list := adapters.ModelList{Object: "list", Data: []adapters.Model{}}
	now := time.Now().Unix()
	for _, m := range served {
		list.Data = append(list.Data, adapters.Model{ID: m, Object: "model", Created: now, OwnedBy: "frontdoor"})
	}
	for _, a := range aliases {
		list.Data = append(list.Data, adapters.Model{ID: a, Object: "model", Created: now, OwnedBy: "frontdoor-alias"})
	}
	b, _ := json.Marshal(list)
	return b
}
