package gpusim

import (
	"bufio"
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// pollEvery is how often a waiting, sleeping or hanging request checks
// whether its client is still connected.
const pollEvery = 25 * time.Millisecond

var (
	errGone     = errors.New("client went away")
	errShutdown = errors.New("server is shutting down")
	errAborted  = errors.New("request aborted by shutdown")
)

// job is one admitted generation request. Everything it needs is copied out
// of the fasthttp.RequestCtx before the handler returns.
type job struct {
	s            *Server
	chat         bool
	stream       bool
	includeUsage bool
	capped       bool // n was cut by max_tokens
	hang         bool
	verdict      verdict // a judge request's answer (n is 1); verdictNone otherwise
	model        string  // one of cfg.Models
	n            int     // content tokens to generate
	choices      int     // n of the request: choices to generate (1 on the fast path)
	tool         string  // the function a chat answer calls ("": text); see readChoices
	reasoning    int     // DashScope reasoning tokens (streams only)
	promptTokens int
	blocks       []uint64      // cumulative prompt block hashes (prefix cache on)
	prefill      time.Duration // prefill time of the uncached prompt tokens
	hash         uint64        // FNV-64a of the prompt text: the token stream seed
	arrival      time.Time
	created      int64
	id           uint64
	conn         net.Conn
	ticket       *ticket
	running      bool  // holds a scheduler slot
	kv           int64 // tokens this job added to the KV gauge
	generated    int
	timer        *time.Timer
	resp         *respJob // a Responses API request's own fields; nil otherwise
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// acquire waits for a running slot, leaving the queue if the client goes
// away or the server aborts.
func (j *job) acquire() error {
	s := j.s
	select {
	case <-j.ticket.ready:
		j.start()
		return nil
	default:
	}
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		select {
		case <-j.ticket.ready:
			j.start()
			return nil
		case <-s.abort:
			s.sched.cancel(j.ticket)
			return errAborted
		case <-tick.C:
			if !connAlive(j.conn) {
				s.sched.cancel(j.ticket)
				return errGone
			}
		}
	}
}

// start accounts for the prefill once the job holds a slot.
func (j *job) start() {
	j.running = true
	j.kv = int64(j.promptTokens)
	j.s.kvTokens.Add(j.kv)
	j.s.promptTokens.Add(j.kv)
	uncached := j.promptTokens
	if c := j.s.prefix; c != nil {
		uncached -= c.lookupAndInsert(j.blocks, j.s.cfg.BlockSize, j.promptTokens)
	}
	j.prefill = time.Duration(uncached) * j.s.cfg.PrefillPerToken
}

// produced accounts for k generated tokens.
func (j *job) produced(k int) {
	if j.generated == 0 {
		j.s.ttft.observe(time.Since(j.arrival))
	}
	j.generated += k
	j.kv += int64(k)
	j.s.kvTokens.Add(int64(k))
	j.s.genTokens.Add(int64(k))
}

// end frees the slot and records the outcome (err == nil: completed).
func (j *job) end(err error) {
	s := j.s
	if j.timer != nil {
		j.timer.Stop()
	}
	if j.running {
		s.kvTokens.Add(-j.kv)
		s.sched.release()
		j.running = false
	}
	if err == nil {
		s.completed.Add(1)
		s.e2e.observe(time.Since(j.arrival))
		if j.verdict != verdictNone {
			s.judged[j.verdict].Add(1)
		}
	} else {
		s.cancelled.Add(1)
	}
	s.active.done()
}

// pause sleeps d, checking every pollEvery (and at the end) that the client
// is still there. d <= 0 returns at once without any system call.
func (j *job) pause(d time.Duration) error {
	if d <= 0 {
		return nil
	}
	deadline := time.Now().Add(d)
	for {
		step := time.Until(deadline)
		if step <= 0 {
			return nil
		}
		step = min(step, pollEvery)
		if j.timer == nil {
			j.timer = time.NewTimer(step)
		} else {
			j.timer.Reset(step)
		}
		select {
		case <-j.timer.C:
		case <-j.s.abort:
			return errAborted
		}
		if !connAlive(j.conn) {
			return errGone
		}
	}
}

// hangWait holds the slot until the client leaves or the server shuts down.
func (j *job) hangWait() error {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		select {
		case <-j.s.stopHang:
			return errShutdown
		case <-j.s.abort:
			return errAborted
		case <-tick.C:
			if !connAlive(j.conn) {
				return errGone
			}
		}
	}
}

// answer is the token stream of the content: the prompt's words, or the
// verdict of a judge request.
func (j *job) answer() tokenStream {
	return tokenStream{state: j.hash, fixed: j.verdict.String()}
}

func (j *job) finishReason() string {
	if j.capped {
		return "length"
	}
	return "stop"
}

// appendHead appends the JSON prefix shared by every object of this response,
// up to and including `"choices":[`.
func (j *job) appendHead(dst []byte, object string) []byte {
	if j.chat {
		dst = append(dst, `{"id":"chatcmpl-`...)
	} else {
		dst = append(dst, `{"id":"cmpl-`...)
	}
	dst = append(dst, j.s.idPrefix[:]...)
	var idHex [16]byte
	for i, id := 15, j.id; i >= 0; i-- {
		idHex[i] = hexDigits[id&0xf]
		id >>= 4
	}
	dst = append(dst, idHex[:]...)
	dst = append(dst, `","object":"`...)
	dst = append(dst, object...)
	dst = append(dst, `","created":`...)
	dst = strconv.AppendInt(dst, j.created, 10)
	dst = append(dst, `,"model":`...)
	dst = appendJSONString(dst, j.model)
	return append(dst, `,"choices":[`...)
}

// runUnary generates a non-streaming response inside the handler.
func (j *job) runUnary(ctx *fasthttp.RequestCtx) {
	if !j.plain() {
		j.runUnaryChoices(ctx)
		return
	}
	s := j.s
	err := j.acquire()
	if err == nil && j.hang {
		err = j.hangWait()
	}
	if err == nil {
		err = j.pause(s.jittered(s.cfg.TTFT + j.prefill))
	}
	bp := bufPool.Get().(*[]byte)
	b := (*bp)[:0]
	if err == nil {
		if j.resp != nil {
			b, err = j.appendResponseAnswer(b)
		} else {
			b, err = j.appendCompletion(b)
		}
	}
	if err == nil {
		ctx.SetContentType("application/json")
		ctx.SetBody(b)
	} else {
		ctx.SetConnectionClose()
		if err == errGone {
			ctx.SetStatusCode(499) // nginx's "client closed request"; nobody reads it
		} else {
			s.writeError(ctx, errUnavailable, "Request aborted: "+err.Error())
		}
	}
	*bp = b
	bufPool.Put(bp)
	j.end(err)
}

// appendCompletion generates a whole chat.completion (or text_completion).
func (j *job) appendCompletion(b []byte) ([]byte, error) {
	if j.chat {
		b = j.appendHead(b, "chat.completion")
		b = append(b, `{"index":0,"message":{"role":"assistant","content":"`...)
	} else {
		b = j.appendHead(b, "text_completion")
		b = append(b, `{"index":0,"text":"`...)
	}
	b, err := j.appendAnswer(b)
	if err != nil {
		return b, err
	}
	if j.chat {
		b = append(b, `"},"logprobs":null,"finish_reason":"`...)
	} else {
		b = append(b, `","logprobs":null,"finish_reason":"`...)
	}
	b = append(b, j.finishReason()...)
	b = append(b, `","stop_reason":null}],"usage":`...)
	b = appendUsage(b, j.promptTokens, j.n, 0)
	return append(b, '}'), nil
}

// appendAnswer generates the answer's n tokens into dst, at the
// inter-token pace (vocabulary words need no JSON escaping).
func (j *job) appendAnswer(dst []byte) ([]byte, error) {
	s := j.s
	ts := j.answer()
	if s.cfg.ITL <= 0 {
		// No decode time to simulate: generate everything at once.
		j.produced(j.n)
		return appendTokens(dst, &ts, j.n), nil
	}
	for i := 0; i < j.n; i++ {
		if i > 0 {
			if err := j.pause(s.jittered(s.cfg.ITL)); err != nil {
				return dst, err
			}
			dst = append(dst, ' ')
		}
		dst = append(dst, ts.next()...)
		j.produced(1)
	}
	return dst, nil
}

// runStream is the body stream writer of a streaming request. It runs in its
// own goroutine (fasthttp pipes its output to the connection), so it only
// uses what the handler copied into j.
func (j *job) runStream(w *bufio.Writer) {
	err := j.acquire()
	if err == nil && j.hang {
		err = j.hangWait()
	}
	switch {
	case err != nil:
	case j.resp != nil:
		err = j.streamResponse(w)
	case j.plain():
		err = j.streamTokens(w)
	default:
		err = j.streamChoices(w)
	}
	j.end(err)
}

// SSE fragments. A chunk is "data: " + head + one of the choice bodies.
const (
	ssePrefix      = "data: "
	chunkTail      = `,"logprobs":null,"finish_reason":null}]}` + "\n\n"
	roleChoice     = `{"index":0,"delta":{"role":"assistant","content":""}` + chunkTail
	contentOpen    = `{"index":0,"delta":{"content":"`
	reasoningOpen  = `{"index":0,"delta":{"reasoning_content":"`
	deltaClose     = `"}`
	textOpen       = `{"index":0,"text":"`
	textClose      = `"`
	sseDone        = "data: [DONE]\n\n"
	chatFinishPre  = `{"index":0,"delta":{},"logprobs":null,"finish_reason":"`
	textFinishPre  = `{"index":0,"text":"","logprobs":null,"finish_reason":"`
	finishPost     = `","stop_reason":null}]}` + "\n\n"
	usageChunkOpen = `],"usage":`
)

func (j *job) streamTokens(w *bufio.Writer) error {
	s := j.s
	if err := j.pause(s.jittered(s.cfg.TTFT + j.prefill)); err != nil {
		return err
	}
	object := "text_completion"
	if j.chat {
		object = "chat.completion.chunk"
	}
	head := j.appendHead(make([]byte, 0, 160), object)
	if j.chat {
		w.WriteString(ssePrefix)
		w.Write(head)
		w.WriteString(roleChoice)
	}
	think := tokenStream{state: j.hash ^ reasoningSalt}
	answer := j.answer()
	total := j.reasoning + j.n
	for i := 0; i < total; i++ {
		if i > 0 {
			if err := j.pause(s.jittered(s.cfg.ITL)); err != nil {
				return err
			}
		}
		w.WriteString(ssePrefix)
		w.Write(head)
		var word string
		last := false
		switch {
		case i < j.reasoning:
			word, last = think.next(), i == j.reasoning-1
			w.WriteString(reasoningOpen)
		case j.chat:
			word, last = answer.next(), i == total-1
			w.WriteString(contentOpen)
		default:
			word, last = answer.next(), i == total-1
			w.WriteString(textOpen)
		}
		w.WriteString(word)
		if !last {
			w.WriteByte(' ')
		}
		if j.chat {
			w.WriteString(deltaClose)
		} else {
			w.WriteString(textClose)
		}
		w.WriteString(chunkTail)
		if err := w.Flush(); err != nil {
			return errGone
		}
		j.produced(1)
	}
	w.WriteString(ssePrefix)
	w.Write(head)
	if j.chat {
		w.WriteString(chatFinishPre)
	} else {
		w.WriteString(textFinishPre)
	}
	w.WriteString(j.finishReason())
	w.WriteString(finishPost)
	if j.includeUsage {
		w.WriteString(ssePrefix)
		w.Write(head)
		w.WriteString(usageChunkOpen)
		w.Write(appendUsage(make([]byte, 0, 128), j.promptTokens, j.n+j.reasoning, j.reasoning))
		w.WriteString("}\n\n")
	}
	w.WriteString(sseDone)
	if err := w.Flush(); err != nil {
		return errGone
	}
	return nil
}
