package gpusim

import (
	"bufio"
	"strconv"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// maxChoices bounds n, as vLLM bounds it by its sequence budget.
const maxChoices = 128

// choiceSalt seeds choice i's words with hash + i*choiceSalt, so choice 0
// says what a request with n 1 says and the others differ.
const choiceSalt uint64 = 0x2545f4914f6cdd1d

// readChoices sets what a request asks beyond one plain answer: n choices,
// and for chat a tool call when tool_choice asks for one.
//
// tool_choice "required" calls the first tool; {"type":"function",
// "function":{"name":X}} calls X; "auto", "none" and no tool_choice answer
// with text (the simulator does not guess when a model would call a tool).
// The call's arguments are {"text":"<the answer's words>"}.
func (j *job) readChoices(v *fastjson.Value) {
	j.choices = 1
	if n := v.GetInt("n"); n > 1 {
		j.choices = min(n, maxChoices)
	}
	if !j.chat {
		return
	}
	tools := v.GetArray("tools")
	if len(tools) == 0 {
		return
	}
	tc := v.Get("tool_choice")
	switch {
	case tc == nil:
	case tc.Type() == fastjson.TypeString && string(tc.GetStringBytes()) == "required":
		j.tool = string(tools[0].GetStringBytes("function", "name"))
	case tc.Type() == fastjson.TypeObject:
		j.tool = string(tc.GetStringBytes("function", "name"))
	}
}

// plain reports whether the job is one text answer (the fast path).
func (j *job) plain() bool { return j.choices <= 1 && j.tool == "" }

// choiceStream is choice i's words.
func (j *job) choiceStream(i int) tokenStream {
	ts := j.answer()
	ts.state += uint64(i) * choiceSalt
	return ts
}

func (j *job) choiceFinish() string {
	if j.tool != "" {
		return "tool_calls"
	}
	return j.finishReason()
}

// callID is choice i's tool call id.
func (j *job) callID(dst []byte, i int) []byte {
	dst = append(dst, `"call_`...)
	dst = strconv.AppendUint(dst, j.id, 16)
	dst = append(dst, '_')
	dst = strconv.AppendInt(dst, int64(i), 10)
	return append(dst, '"')
}

// words generates every choice's words, pausing one ITL between tokens
// (the choices decode as one batch).
func (j *job) words(each func(step int, words []string) error) error {
	streams := make([]tokenStream, j.choices)
	for i := range streams {
		streams[i] = j.choiceStream(i)
	}
	words := make([]string, j.choices)
	for step := 0; step < j.n; step++ {
		if step > 0 && j.s.cfg.ITL > 0 {
			if err := j.pause(j.s.jittered(j.s.cfg.ITL)); err != nil {
				return err
			}
		}
		for i := range streams {
			words[i] = streams[i].next()
		}
		if err := each(step, words); err != nil {
			return err
		}
		j.produced(1)
	}
	return nil
}

// runUnaryChoices is runUnary for n > 1 or a tool call.
func (j *job) runUnaryChoices(ctx *fasthttp.RequestCtx) {
	err := j.acquire()
	if err == nil && j.hang {
		err = j.hangWait()
	}
	if err == nil {
		err = j.pause(j.s.jittered(j.s.cfg.TTFT + j.prefill))
	}
	texts := make([][]byte, j.choices)
	if err == nil {
		err = j.words(func(step int, words []string) error {
			for i, w := range words {
				if step > 0 {
					texts[i] = append(texts[i], ' ')
				}
				texts[i] = append(texts[i], w...)
			}
			return nil
		})
	}
	if err != nil {
		ctx.SetConnectionClose()
		if err == errGone {
			ctx.SetStatusCode(499)
		} else {
			j.s.writeError(ctx, errUnavailable, "Request aborted: "+err.Error())
		}
		j.end(err)
		return
	}
	var b []byte
	if j.chat {
		b = j.appendHead(b, "chat.completion")
	} else {
		b = j.appendHead(b, "text_completion")
	}
	for i, text := range texts {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		switch {
		case j.tool != "":
			b = append(b, `,"message":{"role":"assistant","content":null,"tool_calls":[{"id":`...)
			b = j.callID(b, i)
			b = append(b, `,"type":"function","function":{"name":`...)
			b = appendJSONString(b, j.tool)
			b = append(b, `,"arguments":`...)
			b = appendJSONString(b, `{"text":"`+string(text)+`"}`)
			b = append(b, `}}]}`...)
		case j.chat:
			b = append(b, `,"message":{"role":"assistant","content":`...)
			b = appendJSONString(b, string(text))
			b = append(b, '}')
		default:
			b = append(b, `,"text":`...)
			b = appendJSONString(b, string(text))
		}
		b = append(b, `,"logprobs":null,"finish_reason":"`...)
		b = append(b, j.choiceFinish()...)
		b = append(b, `","stop_reason":null}`...)
	}
	b = append(b, `],"usage":`...)
	b = appendUsage(b, j.promptTokens, j.n*j.choices, 0)
	b = append(b, '}')
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
	j.end(nil)
}

// streamChoices is streamTokens for n > 1 or a tool call: per token, one
// chunk per choice (OpenAI's interleaving, each with its index); a tool
// call's first chunk names the call, the next ones carry its arguments.
func (j *job) streamChoices(w *bufio.Writer) error {
	if err := j.pause(j.s.jittered(j.s.cfg.TTFT + j.prefill)); err != nil {
		return err
	}
	object := "text_completion"
	if j.chat {
		object = "chat.completion.chunk"
	}
	head := j.appendHead(make([]byte, 0, 160), object)
	var b []byte
	chunk := func(i int, body func([]byte) []byte) {
		b = append(b[:0], ssePrefix...)
		b = append(b, head...)
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = body(b)
		_, _ = w.Write(b)
	}
	if j.chat {
		for i := 0; i < j.choices; i++ {
			chunk(i, func(b []byte) []byte {
				if j.tool == "" {
					return append(b, `,"delta":{"role":"assistant","content":""}`+chunkTail...)
				}
				b = append(b, `,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":`...)
				b = j.callID(b, i)
				b = append(b, `,"type":"function","function":{"name":`...)
				b = appendJSONString(b, j.tool)
				return append(b, `,"arguments":"{\"text\":\""}}]}`+chunkTail...)
			})
		}
	}
	err := j.words(func(step int, words []string) error {
		for i, word := range words {
			if step < j.n-1 {
				word += " "
			}
			chunk(i, func(b []byte) []byte {
				switch {
				case j.tool != "":
					b = append(b, `,"delta":{"tool_calls":[{"index":0,"function":{"arguments":`...)
					b = appendJSONString(b, word)
					return append(b, `}}]}`+chunkTail...)
				case j.chat:
					b = append(b, `,"delta":{"content":`...)
				default:
					b = append(b, `,"text":`...)
				}
				b = appendJSONString(b, word)
				if j.chat {
					b = append(b, '}')
				}
				return append(b, chunkTail...)
			})
		}
		if w.Flush() != nil {
			return errGone
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := 0; i < j.choices; i++ {
		chunk(i, func(b []byte) []byte {
			if j.tool != "" {
				b = append(b, `,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"}"}}]}`+chunkTail...)
				b = append(b, ssePrefix...)
				b = append(b, head...)
				b = append(b, `{"index":`...)
				b = strconv.AppendInt(b, int64(i), 10)
			}
			if j.chat {
				b = append(b, `,"delta":{}`...)
			} else {
				b = append(b, `,"text":""`...)
			}
			b = append(b, `,"logprobs":null,"finish_reason":"`...)
			b = append(b, j.choiceFinish()...)
			return append(b, finishPost...)
		})
	}
	if j.includeUsage {
		_, _ = w.WriteString(ssePrefix)
		_, _ = w.Write(head)
		_, _ = w.WriteString(usageChunkOpen)
		_, _ = w.Write(appendUsage(make([]byte, 0, 128), j.promptTokens, j.n*j.choices, 0))
		_, _ = w.WriteString("}\n\n")
	}
	_, _ = w.WriteString(sseDone)
	if w.Flush() != nil {
		return errGone
	}
	return nil
}
