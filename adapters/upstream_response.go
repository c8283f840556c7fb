package adapters

import (
	"bytes"
	"fmt"
	"io"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// UpstreamResponse is an upstream answer. For a stream with a 2xx status the
// body is read with Next; otherwise Body holds it whole. Close must be called.
type UpstreamResponse struct {
	Status      int
	ContentType []byte // valid until Close
	RetryAfter  []byte // valid until Close
	Body        []byte // valid until Close
	Model       string // the upstream's real model, when a backend maps names
	// Converted is true when the upstream answered a non-streaming request
	// with an event stream, which Send turned into the JSON answer in Body.
	Converted bool

	modelFrom, modelTo []byte // renaming of the model in streamed events

	resp     *fasthttp.Response
	conn     *trackedConn
	sse      *SSEReader // pooled; nil once closed
	stream   bool       // the body is an event stream, read with Next
	onRead   ReadHook   // see OnRead
	idle     time.Duration
	total    time.Duration // the whole exchange's allowance, for messages
	deadline time.Time
	atTotal  bool // the read deadline in force is the total one
}

// Streaming reports whether the body is read with Next.
func (r *UpstreamResponse) Streaming() bool { return r.stream }

// Next returns the next SSE event of a streaming answer. Each read waits at
// most the idle timeout (and never past the total deadline).
func (r *UpstreamResponse) Next() (SSEEvent, error) {
	if r.sse == nil {
		return SSEEvent{}, io.EOF
	}
	if r.conn == nil && r.onRead != nil && !r.sse.Buffered() {
		if err := r.onRead.BeforeRead(); err != nil {
			return SSEEvent{}, err
		}
	}
	ev, err := r.sse.Next()
	if err != nil && err != io.EOF && isTimeout(err) {
		if r.atTotal {
			return ev, fmt.Errorf("upstream stream cut: %w (%s)", ErrTotalTimeout, r.total)
		}
		return ev, fmt.Errorf("upstream idle for more than %s: %w", r.idle, ErrIdleTimeout)
	}
	return r.rename(ev), err
}

func (r *UpstreamResponse) rename(ev SSEEvent) SSEEvent {
	if r.modelFrom != nil && bytes.Contains(ev.Raw, r.modelFrom) {
		ev.Raw = bytes.ReplaceAll(ev.Raw, r.modelFrom, r.modelTo)
		ev.Data = bytes.ReplaceAll(ev.Data, r.modelFrom, r.modelTo)
	}
	return ev
}

// ReadHook is called by a stream's reader before it reads (see OnRead).
type ReadHook interface {
	BeforeRead() error
}

// OnRead sets h to run each time reading the stream is about to read the
// upstream's socket, where it may wait for the node: a caller that batches
// events (a pump writing to a client) flushes them in h, so what arrived in
// one read leaves in one write and no event waits for the next. Without a
// socket to watch, h runs before every Next that finds the event reader's
// buffer empty. An error from h fails that read, and so Next.
func (r *UpstreamResponse) OnRead(h ReadHook) {
	r.onRead = h
}

// beforeRead runs before each read of a stream's socket: the caller's
// OnRead, then the idle deadline for this read (never past the total one).
func (r *UpstreamResponse) beforeRead() error {
	if r.onRead != nil {
		if err := r.onRead.BeforeRead(); err != nil {
			return err
		}
	}
	d := time.Now().Add(r.idle)
	r.atTotal = !d.Before(r.deadline)
	if r.atTotal {
		d = r.deadline
	}
	_ = r.conn.Conn.SetReadDeadline(d)
	return nil
}

// Interrupt cuts a streaming answer's connection from another goroutine;
// the reader's next Next fails. Close must still be called by the reader.
func (r *UpstreamResponse) Interrupt() {
	if r.conn != nil {
		_ = r.conn.Conn.Close()
	}
}

// Close releases the answer. An unfinished stream closes its connection, so
// the upstream sees the request end at once.
func (r *UpstreamResponse) Close() {
	if r.conn != nil {
		r.conn.stream = nil
	}
	if r.sse != nil {
		ReleaseSSEReader(r.sse)
		r.sse = nil
	}
	if r.resp != nil {
		_ = r.resp.CloseBodyStream()
		fasthttp.ReleaseResponse(r.resp)
		r.resp = nil
	}
}

var (
	textEventStream = []byte("text/event-stream")
	applicationJSON = []byte("application/json")
)

// checkAnswer checks a whole 2xx answer to a non-streaming request, and
// converts an event stream to the JSON answer asked for.
func (r *UpstreamResponse) checkAnswer(ep Endpoint) error {
	switch {
	case ep == EndpointPassthrough:
		return nil // the client's to read, as the node sent it
	case ep == EndpointEmbeddings, !bytes.HasPrefix(r.ContentType, textEventStream):
		return checkAnswerJSON(ep, r.Body)
	}
	body, err := StreamToJSON(ep, r.Body)
	if err != nil {
		return fmt.Errorf("%w: an event stream for a non-streaming request, not whole and clean: %w", ErrMalformedAnswer, err)
	}
	r.Body, r.ContentType, r.Converted = body, applicationJSON, true
	return nil
}

// checkAnswerJSON checks a whole 2xx JSON answer to a request for ep.
func checkAnswerJSON(ep Endpoint, body []byte) error {
	switch ep {
	case EndpointPassthrough:
		return nil // the client's to read, as the node sent it
	case EndpointResponses:
		return checkResponseObject(body)
	case EndpointEmbeddings:
		return checkJSONAnswer(body, "data")
	}
	return checkJSONAnswer(body, "choices")
}

// checkJSONAnswer reports ErrMalformedAnswer unless body is a JSON object
// with the member want (choices: a completion; data: embeddings) and no
// error. The error never quotes the body (it reaches logs).
func checkJSONAnswer(body []byte, want string) error {
	return checkAnswerObject(body, func(v *fastjson.Value) error {
		if v.Get("error") != nil || v.Get(want) == nil {
			return fmt.Errorf("%w: a 2xx answer with an error object or no %s", ErrMalformedAnswer, want)
		}
		return nil
	})
}

// checkAnswerObject reports ErrMalformedAnswer unless body is a JSON object
// that check accepts. The error never quotes the body.
func checkAnswerObject(body []byte, check func(v *fastjson.Value) error) error {
	p := answerParsers.Get()
	defer answerParsers.Put(p)
	v, err := p.ParseBytes(body)
	switch {
	case err != nil:
		return fmt.Errorf("%w: the body (%d bytes) is not valid JSON", ErrMalformedAnswer, len(body))
	case v.Type() != fastjson.TypeObject:
		return fmt.Errorf("%w: the body is JSON but not an object", ErrMalformedAnswer)
	}
	return check(v)
}
