package adapters

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// Backend sends one request to an upstream and returns its answer,
// positioned after the headers: a streamed body is read event by event with
// Next. It is the extension point for engines that differ in a real way.
type Backend interface {
	Send(ctx context.Context, req *UpstreamRequest) (*UpstreamResponse, error)
	// MapError turns an upstream error answer into the client's OpenAI error.
	MapError(status int, body []byte) *APIError
	Name() string
}

var _ Backend = (*HTTPBackend)(nil)

// UpstreamRequest is one request for a backend.
type UpstreamRequest struct {
	Endpoint  Endpoint
	Body      []byte
	Stream    bool
	RequestID string
	Model     string        // the model named in Body (after alias resolution)
	Trace     *TraceContext // nil: no trace context to pass on
	// Path and ContentType are EndpointPassthrough's: the client's path
	// (with its query, if any) and content type, sent as they came; see
	// PassthroughURI for where the path leads.
	Path        string
	ContentType []byte
}

// TraceContext is the W3C trace context of an attempt, sent upstream as
// the traceparent and tracestate headers.
type TraceContext struct {
	Parent, State string
}

// Errors of Send that happened before the first byte; all are retryable on
// another node, except ErrAnswerTooLarge (another node would most likely
// answer as much). ErrIdleTimeout and ErrTotalTimeout also end streams
// (Next).
var (
	ErrConnect          = errors.New("connect failed")
	ErrFirstByteTimeout = errors.New("no response before the first-byte timeout")
	ErrIdleTimeout      = errors.New("stream idle timeout")
	ErrTotalTimeout     = errors.New("timeouts.total reached")
	ErrUpstreamClosed   = errors.New("upstream closed the connection")
	ErrNoFinalAnswer    = errors.New("upstream answered with no final HTTP status")
	// ErrMalformedAnswer is a 2xx answer that is not one: a body that is
	// not JSON (cut by a short Content-Length, say), an error object, or an
	// event stream for a non-streaming request that is not whole and clean.
	ErrMalformedAnswer = errors.New("malformed answer")
	// ErrAnswerTooLarge is an answer over Config.MaxBody.
	ErrAnswerTooLarge = errors.New("answer too large")
)

// HTTPBackend speaks OpenAI-compatible HTTP to one upstream (vLLM, SGLang,
// TGI's Messages API, DashScope's compatible mode or any OpenAI server).
type HTTPBackend struct {
	target Target
	cfg    Config
	client *fasthttp.HostClient
	uris   [NumEndpoints]string // absolute request URI by Endpoint
	root   string               // scheme://host plus the base path without its version segment
	auth   string               // "Bearer <key>" or ""
}

// NewHTTPBackend builds a backend with its own keep-alive pool.
func NewHTTPBackend(t Target, cfg Config) (*HTTPBackend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	u, err := BaseURL(t.URL)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.Name, err)
	}
	host := u.Host
	if u.Port() == "" {
		if u.Scheme == "https" {
			host += ":443"
		} else {
			host += ":80"
		}
	}
	b := &HTTPBackend{target: t, cfg: cfg}
	for ep := range NumEndpoints {
		// Absolute, so the scheme (https upstreams) and the Host header
		// (as written, without a default port) come from the URL.
		b.uris[ep] = u.Scheme + "://" + u.Host + u.Path + ep.Path()
	}
	if t.ResponsesURL != "" {
		r, err := url.Parse(t.ResponsesURL)
		if err != nil || r.Host != u.Host || r.Scheme != u.Scheme {
			return nil, fmt.Errorf("%s: the Responses URL must be on the base URL's scheme and host", t.Name)
		}
		b.uris[EndpointResponses] = r.String()
	}
	b.root = u.Scheme + "://" + u.Host + u.Path[:strings.LastIndexByte(u.Path, '/')]
	if t.APIKey != "" {
		b.auth = "Bearer " + t.APIKey
	}
	dialer := &net.Dialer{Timeout: cfg.Connect, KeepAlive: 30 * time.Second}
	b.client = &fasthttp.HostClient{
		Addr:                host,
		Name:                "frontdoor",
		IsTLS:               u.Scheme == "https",
		TLSConfig:           cfg.TLS,
		MaxConns:            cfg.MaxConns,
		MaxIdleConnDuration: 30 * time.Second,
		// The read buffer is held by every open stream; it bounds the
		// answer's header, as nginx's proxy_buffer_size (4 KiB on x86-64)
		// does.
		// The write buffer is only held while a request is written.
		ReadBufferSize:                upstreamReadBuffer,
		WriteBufferSize:               16 << 10,
		DisableHeaderNamesNormalizing: false,
		NoDefaultUserAgentHeader:      true,
		RetryIfErr:                    func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
		// Past it, fasthttp stops at the Content-Length (or once it has
		// read that much), fails with ErrBodyTooLarge and closes the
		// connection.
		MaxResponseBodySize: cfg.MaxBody,
		// fasthttp's parse errors otherwise quote the answer's bytes, which
		// reach the client's error message and the logs.
		SecureErrorLogMessage: true,
		Dial: func(addr string) (net.Conn, error) {
			c, err := dialAside(dialer, addr)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrConnect, err)
			}
			tc := &trackedConn{Conn: c}
			tc.local = connAddr{Addr: c.LocalAddr(), conn: tc}
			return tc, nil
		},
	}
	return b, nil
}

// dialAside dials on a goroutine of its own. The dial path (resolver,
// socket, poller) is deep: run on the caller's goroutine (a client
// connection's, which goes on to pump the stream) it grows that stack from
// 8 to 16 KiB, and the GC never shrinks it back while the pump is parked
// (its frames are over a quarter of 16 KiB): 8 MB at 1,000 open streams,
// each of which dials its own upstream connection. A goroutine per new
// connection costs far less.
func dialAside(d *net.Dialer, addr string) (net.Conn, error) {
	type dialed struct {
		c   net.Conn
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		c, err := d.Dial("tcp", addr)
		ch <- dialed{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// upstreamReadBuffer is the upstream connections' read buffer.
const upstreamReadBuffer = 4 << 10

var headerRequestID = []byte("X-Request-Id")

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// PassthroughURI is where a passed-through path goes on this node: a path
// under /v1/ continues the node's OpenAI base (http://h:8000/v1 +
// /rerank), any other path the server root's (http://h:8000 + /tokenize,
// as vLLM serves it).
func (b *HTTPBackend) PassthroughURI(path string) string {
	if rest, ok := strings.CutPrefix(path, "/v1/"); ok {
		return b.uris[EndpointChat][:len(b.uris[EndpointChat])-len(EndpointChat.Path())] + "/" + rest
	}
	return b.root + path
}

// Name returns the upstream's name.
func (b *HTTPBackend) Name() string { return b.target.Name }

// Target returns the upstream's description.
func (b *HTTPBackend) Target() Target { return b.target }

// Send performs the request. It returns once the response headers (and, for
// non-streaming answers, the body) have arrived. A 2xx answer read whole is
// checked: a JSON object with choices, or else ErrMalformedAnswer; an event
// stream for a non-streaming request is converted to that JSON (Converted).
func (b *HTTPBackend) Send(ctx context.Context, ur *UpstreamRequest) (*UpstreamResponse, error) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(fasthttp.MethodPost)
	if ur.Endpoint == EndpointPassthrough {
		req.SetRequestURI(b.PassthroughURI(ur.Path))
		req.Header.SetContentTypeBytes(ur.ContentType)
	} else {
		req.SetRequestURI(b.uris[ur.Endpoint])
		req.Header.SetContentType("application/json")
	}
	if b.auth != "" {
		req.Header.Set(fasthttp.HeaderAuthorization, b.auth)
	}
	if ur.RequestID != "" {
		if printableASCII(ur.RequestID) {
			req.Header.SetCanonical(headerRequestID, []byte(ur.RequestID))
		} else {
			req.Header.Set("X-Request-Id", ur.RequestID) // strips line breaks
		}
	}
	if tc := ur.Trace; tc != nil && tc.Parent != "" {
		req.Header.Set("traceparent", tc.Parent)
		if tc.State != "" {
			req.Header.Set("tracestate", tc.State)
		}
	}
	if ur.Stream {
		req.Header.Set(fasthttp.HeaderAccept, "text/event-stream")
	}
	for k, v := range b.target.Headers {
		req.Header.Set(k, v)
	}
	req.SetBodyRaw(ur.Body)

	// A non-streaming answer without a context deadline needs no clock
	// reading here: its deadline is the total timeout from now.
	wait, waitIsTotal := b.cfg.Total, true
	var start, total time.Time
	if d, ok := ctx.Deadline(); ok || ur.Stream {
		start = time.Now()
		total = start.Add(b.cfg.Total)
		if ok && d.Before(total) {
			total = d
		}
		wait = total.Sub(start)
	}
	if ur.Stream && b.cfg.FirstByte < wait {
		wait, waitIsTotal = b.cfg.FirstByte, false
	}
	if wait <= 0 {
		return nil, fmt.Errorf("%w (%s) before the request was sent", ErrTotalTimeout, b.cfg.Total)
	}
	req.SetTimeout(wait)

	resp := fasthttp.AcquireResponse()
	resp.StreamBody = ur.Stream
	if err := b.client.Do(req, resp); err != nil {
		fasthttp.ReleaseResponse(resp)
		return nil, b.classify(err, waitIsTotal)
	}
	if s := resp.StatusCode(); s < 200 || s > 599 {
		// fasthttp reads past interim 1xx answers but not 101: the
		// connection now speaks something else.
		resp.SetConnectionClose()
		_ = resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
		return nil, fmt.Errorf("%w: status %d", ErrNoFinalAnswer, s)
	}
	out := &UpstreamResponse{
		Status:      resp.StatusCode(),
		ContentType: resp.Header.ContentType(),
		RetryAfter:  resp.Header.Peek(fasthttp.HeaderRetryAfter),
		resp:        resp,
		idle:        b.cfg.Idle,
		total:       b.cfg.Total,
		deadline:    total,
	}
	if !ur.Stream {
		out.Body = resp.Body()
		if out.Status/100 == 2 {
			if err := out.checkAnswer(ur.Endpoint); err != nil {
				out.Close()
				return nil, err
			}
		}
		return out, nil
	}
	if a, ok := resp.LocalAddr().(*connAddr); ok {
		out.conn = a.conn // each path below sets the read deadline before it reads
	}
	stream := resp.BodyStream()
	if out.Status/100 != 2 || !bytes.HasPrefix(out.ContentType, textEventStream) {
		// An error (or a server that ignored stream:true): read it whole.
		// An error body past 4 MiB is cut (its message is all that is
		// used); an answer past MaxBody is refused. Either way a body not
		// read to its end closes the connection.
		if out.conn != nil {
			_ = out.conn.Conn.SetReadDeadline(time.Now().Add(b.cfg.Idle))
		}
		limit := int64(4 << 20)
		if out.Status/100 == 2 {
			limit = int64(b.cfg.MaxBody) + 1
		}
		body, err := io.ReadAll(io.LimitReader(stream, limit))
		if err != nil {
			out.Close()
			return nil, b.classify(err, false)
		}
		out.Body = body
		if out.Status/100 == 2 {
			if len(body) > b.cfg.MaxBody {
				out.Close()
				return nil, b.tooLarge()
			}
			if err := checkAnswerJSON(ur.Endpoint, body); err != nil {
				out.Close()
				return nil, err
			}
		}
		return out, nil
	}
	// Engines send stream headers before the first token, so the first-byte
	// timeout covers the first event too; until it has arrived nothing has
	// reached the client and the request may still go to another node.
	out.sse, out.stream = AcquireSSEReader(stream), true
	firstBy, firstIsTotal := start.Add(b.cfg.FirstByte), false
	if !firstBy.Before(total) {
		firstBy, firstIsTotal = total, true
	}
	if out.conn != nil {
		_ = out.conn.Conn.SetReadDeadline(firstBy)
	}
	_, err := out.sse.Next()
	if err != nil {
		out.Close()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: stream ended before its first event", ErrUpstreamClosed)
		}
		return nil, b.classify(err, firstIsTotal)
	}
	out.sse.Unread() // the first Next hands it out: its bytes are still held
	if out.conn != nil {
		out.conn.stream = out
	}
	return out, nil
}

func (b *HTTPBackend) tooLarge() error {
	return fmt.Errorf("%w: over limits.max_upstream_body_bytes (%d bytes)", ErrAnswerTooLarge, b.cfg.MaxBody)
}

// classify maps a failure of the exchange to the errors of Send; a timeout
// is the total one when atTotal (the deadline in force was the total
// deadline), else the first-byte one.
func (b *HTTPBackend) classify(err error, atTotal bool) error {
	switch {
	case errors.Is(err, ErrConnect):
		return err
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return b.tooLarge()
	case isTimeout(err) && atTotal:
		return fmt.Errorf("%w (%s) before the whole answer", ErrTotalTimeout, b.cfg.Total)
	case isTimeout(err):
		return fmt.Errorf("%w: %w", ErrFirstByteTimeout, err)
	case errors.Is(err, fasthttp.ErrConnectionClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: %w", ErrUpstreamClosed, err)
	default:
		var opErr *net.OpError
		if errors.As(err, &opErr) {
			return fmt.Errorf("%w: %w", ErrUpstreamClosed, err)
		}
		return err
	}
}

func isTimeout(err error) bool {
	if errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// trackedConn lets a streaming answer reach its connection (to set read
// deadlines) through the local address fasthttp records on the response.
type trackedConn struct {
	net.Conn
	local  connAddr
	stream *UpstreamResponse // while a stream is read: its beforeRead runs before each read
}

func (c *trackedConn) Read(p []byte) (int, error) {
	if c.stream != nil {
		if err := c.stream.beforeRead(); err != nil {
			return 0, err
		}
	}
	return c.Conn.Read(p)
}

func (c *trackedConn) LocalAddr() net.Addr { return &c.local }

type connAddr struct {
	net.Addr
	conn *trackedConn
}
