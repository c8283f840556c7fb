package gpusim

import (
	"bufio"
	"bytes"
	"strconv"
	"sync"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// The Responses API (POST /v1/responses), as vLLM serves it: the same
// scheduling, timing and deterministic text as chat (the prompt is the
// instructions, then the input's text), answered as a response object or
// as the stream of response.* events that ends with response.completed
// (response.incomplete when max_output_tokens cut it) carrying the usage.
// Unless the request says "store": false, the response is kept (the last
// storedResponses of them) for GET and DELETE /v1/responses/{id}, and a
// previous_response_id must name a kept one (else 404, as vLLM answers).

// storedResponses is how many responses a server keeps.
const storedResponses = 4096

// respJob is what a Responses request adds to its job.
type respJob struct {
	instructions []byte // the JSON value, or nil
	previous     []byte // previous_response_id's JSON value, or nil
	store        bool
}

func newRespJob(v *fastjson.Value) *respJob {
	r := &respJob{store: true}
	if ins := v.Get("instructions"); ins != nil && ins.Type() == fastjson.TypeString {
		r.instructions = ins.MarshalTo(nil)
	}
	if prev := v.Get("previous_response_id"); prev != nil && prev.Type() == fastjson.TypeString {
		r.previous = prev.MarshalTo(nil)
	}
	if st := v.Get("store"); st != nil && st.Type() == fastjson.TypeFalse {
		r.store = false
	}
	return r
}

// respID is the response's id; its message's id shares the suffix.
func (j *job) respID(prefix string) []byte {
	b := append([]byte(prefix), j.s.idPrefix[:]...)
	var idHex [16]byte
	for i, id := 15, j.id; i >= 0; i-- {
		idHex[i] = hexDigits[id&0xf]
		id >>= 4
	}
	return append(b, idHex[:]...)
}

// appendResponse appends the response object: in progress (no output, no
// usage) or finished with text.
func (j *job) appendResponse(dst []byte, text []byte, finished bool) []byte {
	dst = append(dst, `{"id":"`...)
	dst = append(dst, j.respID("resp_")...)
	dst = append(dst, `","object":"response","created_at":`...)
	dst = strconv.AppendInt(dst, j.created, 10)
	dst = append(dst, `,"model":`...)
	dst = appendJSONString(dst, j.model)
	switch {
	case !finished:
		dst = append(dst, `,"status":"in_progress","error":null,"incomplete_details":null`...)
	case j.capped:
		dst = append(dst, `,"status":"incomplete","error":null,"incomplete_details":{"reason":"max_output_tokens"}`...)
	default:
		dst = append(dst, `,"status":"completed","error":null,"incomplete_details":null`...)
	}
	dst = append(dst, `,"instructions":`...)
	dst = appendRaw(dst, j.resp.instructions)
	dst = append(dst, `,"previous_response_id":`...)
	dst = appendRaw(dst, j.resp.previous)
	dst = append(dst, `,"store":`...)
	dst = strconv.AppendBool(dst, j.resp.store)
	dst = append(dst, `,"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"output":[`...)
	if finished {
		dst = j.appendMessage(dst, text, j.itemStatus())
	}
	dst = append(dst, `],"usage":`...)
	if finished {
		dst = appendResponseUsage(dst, j.promptTokens, j.n)
	} else {
		dst = append(dst, "null"...)
	}
	return append(dst, '}')
}

func (j *job) itemStatus() string {
	if j.capped {
		return "incomplete"
	}
	return "completed"
}

// appendMessage appends the output message item; content is left empty
// while it is in progress.
func (j *job) appendMessage(dst, text []byte, status string) []byte {
	dst = append(dst, `{"id":"`...)
	dst = append(dst, j.respID("msg_")...)
	dst = append(dst, `","type":"message","status":"`...)
	dst = append(dst, status...)
	dst = append(dst, `","role":"assistant","content":[`...)
	if status != "in_progress" {
		dst = appendOutputText(dst, text)
	}
	return append(dst, "]}"...)
}

func appendOutputText(dst, text []byte) []byte {
	dst = append(dst, `{"type":"output_text","text":"`...)
	dst = append(dst, text...) // vocabulary words need no escaping
	return append(dst, `","annotations":[],"logprobs":[]}`...)
}

func appendRaw(dst, v []byte) []byte {
	if v == nil {
		return append(dst, "null"...)
	}
	return append(dst, v...)
}

func appendResponseUsage(dst []byte, prompt, completion int) []byte {
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(prompt), 10)
	dst = append(dst, `,"input_tokens_details":{"cached_tokens":0},"output_tokens":`...)
	dst = strconv.AppendInt(dst, int64(completion), 10)
	dst = append(dst, `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(prompt+completion), 10)
	return append(dst, '}')
}

// appendResponseAnswer generates a whole response object, and keeps it.
func (j *job) appendResponseAnswer(b []byte) ([]byte, error) {
	text, err := j.appendAnswer(make([]byte, 0, j.n*6))
	if err != nil {
		return b, err
	}
	b = j.appendResponse(b, text, true)
	j.keep(bytes.Clone(b))
	return b, nil
}

// keep stores a finished response for GET and DELETE by id.
func (j *job) keep(body []byte) {
	if j.resp.store {
		j.s.stored.put(string(j.respID("resp_")), body)
	}
}

// respEvents writes one response's events with their sequence numbers.
type respEvents struct {
	w   *bufio.Writer
	seq int
}

// emit writes "event: typ" and a data object that starts with the type and
// sequence number, then body (which starts with a comma).
func (e *respEvents) emit(typ string, body ...[]byte) {
	e.w.WriteString("event: ")
	e.w.WriteString(typ)
	e.w.WriteString("\ndata: {\"type\":\"")
	e.w.WriteString(typ)
	e.w.WriteString(`","sequence_number":`)
	e.w.Write(strconv.AppendInt(nil, int64(e.seq), 10))
	for _, b := range body {
		e.w.Write(b)
	}
	e.w.WriteString("}\n\n")
	e.seq++
}

func (j *job) streamResponse(w *bufio.Writer) error {
	s := j.s
	if err := j.pause(s.jittered(s.cfg.TTFT + j.prefill)); err != nil {
		return err
	}
	e := &respEvents{w: w}
	resp := []byte(`,"response":`)
	pending := j.appendResponse(nil, nil, false)
	e.emit("response.created", resp, pending)
	e.emit("response.in_progress", resp, pending)
	item := []byte(`,"output_index":0,"item":`)
	e.emit("response.output_item.added", item, j.appendMessage(nil, nil, "in_progress"))
	part := append(append([]byte(`,"item_id":"`), j.respID("msg_")...), `","output_index":0,"content_index":0`...)
	e.emit("response.content_part.added", part, []byte(`,"part":{"type":"output_text","text":"","annotations":[],"logprobs":[]}`))
	if err := w.Flush(); err != nil {
		return errGone
	}
	answer := j.answer()
	text := make([]byte, 0, j.n*6)
	for i := 0; i < j.n; i++ {
		if i > 0 {
			if err := j.pause(s.jittered(s.cfg.ITL)); err != nil {
				return err
			}
		}
		word := answer.next()
		delta := append([]byte(`,"delta":"`), word...)
		text = append(text, word...)
		if i < j.n-1 {
			delta = append(delta, ' ')
			text = append(text, ' ')
		}
		e.emit("response.output_text.delta", part, append(delta, `","logprobs":[]`...))
		if err := w.Flush(); err != nil {
			return errGone
		}
		j.produced(1)
	}
	e.emit("response.output_text.done", part, []byte(`,"text":"`), text, []byte(`","logprobs":[]`))
	e.emit("response.content_part.done", part, []byte(`,"part":`), appendOutputText(nil, text))
	e.emit("response.output_item.done", item, j.appendMessage(nil, text, j.itemStatus()))
	final := j.appendResponse(nil, text, true)
	j.keep(final)
	end := "response.completed"
	if j.capped {
		end = "response.incomplete"
	}
	e.emit(end, resp, final)
	if err := w.Flush(); err != nil {
		return errGone
	}
	return nil
}

// respStore keeps the last storedResponses response bodies by id.
type respStore struct {
	mu   sync.Mutex
	m    map[string][]byte
	ring [storedResponses]string
	next int
}

func (r *respStore) put(id string, body []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string][]byte{}
	}
	delete(r.m, r.ring[r.next])
	r.ring[r.next] = id
	r.next = (r.next + 1) % len(r.ring)
	r.m[id] = body
}

func (r *respStore) get(id string) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[id]
}

func (r *respStore) has(id string) bool { return r.get(id) != nil }

func (r *respStore) del(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.m[id]
	delete(r.m, id)
	return ok
}

// storedResponse answers GET and DELETE /v1/responses/{id}.
func (s *Server) storedResponse(ctx *fasthttp.RequestCtx, method []byte, id string) {
	if !s.authorized(ctx) {
		s.writeError(ctx, errUnauthorized, "Unauthorized")
		return
	}
	switch string(method) {
	case fasthttp.MethodGet, fasthttp.MethodHead:
		body := s.stored.get(id)
		if body == nil {
			s.writeError(ctx, errNotFound, "Response with id '"+id+"' not found.")
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
	case fasthttp.MethodDelete:
		if !s.stored.del(id) {
			s.writeError(ctx, errNotFound, "Response with id '"+id+"' not found.")
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBody(append(appendJSONString([]byte(`{"id":`), id), `,"object":"response","deleted":true}`...))
	default:
		ctx.Response.Header.Set(fasthttp.HeaderAllow, "GET, DELETE")
		s.writeError(ctx, errMethod, "Method Not Allowed")
	}
}
