package adapters

import (
	"strconv"
	"strings"
)

// Rendering an assembled Answer as the Responses API does: the response
// object (a non-streaming answer) and the event sequence of a stream, each
// event named (event: response.created ...) with a sequence_number, the
// last one response.completed (or response.incomplete for an answer cut
// by max_output_tokens) carrying the usage. No "data: [DONE]" follows, as
// in OpenAI's protocol.

// responseItemIDs are the ids of a response's reasoning item and message,
// derived from the response id.
func responseItemIDs(id string) (reasoning, message string) {
	suffix := strings.TrimPrefix(id, "resp_")
	return "rs_" + suffix, "msg_" + suffix
}

// appendResponseObject renders the response object: finished (with its
// output, status and usage) or as response.created shows it (in progress,
// no output yet).
func appendResponseObject(dst []byte, id string, created int64, a *Answer, finished bool) []byte {
	dst = append(dst, `{"id":`...)
	dst = AppendJSONString(dst, id)
	dst = append(dst, `,"object":"response","created_at":`...)
	dst = strconv.AppendInt(dst, created, 10)
	dst = append(dst, `,"model":`...)
	dst = AppendJSONString(dst, a.Model)
	switch {
	case !finished:
		dst = append(dst, `,"status":"in_progress","error":null,"incomplete_details":null,"output":[]`...)
	case a.Finish == "length":
		dst = append(dst, `,"status":"incomplete","error":null,"incomplete_details":{"reason":"max_output_tokens"},"output":[`...)
	default:
		dst = append(dst, `,"status":"completed","error":null,"incomplete_details":null,"output":[`...)
	}
	if finished {
		rsID, msgID := responseItemIDs(id)
		if a.Reasoning != "" {
			dst = appendReasoningItem(dst, rsID, a.Reasoning, "completed")
			dst = append(dst, ',')
		}
		dst = appendMessageItem(dst, msgID, a.Content, itemStatus(a))
		dst = append(dst, ']')
	}
	dst = append(dst, `,"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"usage":`...)
	if finished {
		dst = appendResponseUsage(dst, a.Usage)
	} else {
		dst = append(dst, "null"...)
	}
	return append(dst, '}')
}

// itemStatus is the message's status: incomplete when the answer was cut.
func itemStatus(a *Answer) string {
	if a.Finish == "length" {
		return "incomplete"
	}
	return "completed"
}

func appendReasoningItem(dst []byte, id, text, status string) []byte {
	dst = append(dst, `{"id":`...)
	dst = AppendJSONString(dst, id)
	dst = append(dst, `,"type":"reasoning","status":"`+status+`","summary":[],"content":[`...)
	if status == "completed" {
		dst = append(dst, `{"type":"reasoning_text","text":`...)
		dst = AppendJSONString(dst, text)
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}

func appendMessageItem(dst []byte, id, text, status string) []byte {
	dst = append(dst, `{"id":`...)
	dst = AppendJSONString(dst, id)
	dst = append(dst, `,"type":"message","status":"`+status+`","role":"assistant","content":[`...)
	if status != "in_progress" {
		dst = appendOutputText(dst, text)
	}
	return append(dst, "]}"...)
}

func appendOutputText(dst []byte, text string) []byte {
	dst = append(dst, `{"type":"output_text","text":`...)
	dst = AppendJSONString(dst, text)
	return append(dst, `,"annotations":[],"logprobs":[]}`...)
}

func appendResponseUsage(dst []byte, u Usage) []byte {
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.PromptTokens), 10)
	dst = append(dst, `,"input_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CachedTokens), 10)
	dst = append(dst, `},"output_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CompletionTokens), 10)
	dst = append(dst, `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.TotalTokens), 10)
	return append(dst, '}')
}

// responseStream builds the events of one replayed response.
type responseStream struct {
	events [][]byte
	seq    int
}

// emit appends one event: "event: <typ>", then the data, an object that
// starts with its type and sequence number and goes on with body (which
// begins with a comma, or is empty).
func (s *responseStream) emit(typ string, body []byte) {
	b := make([]byte, 0, 64+len(typ)*2+len(body))
	b = append(b, "event: "...)
	b = append(b, typ...)
	b = append(b, "\ndata: {\"type\":\""...)
	b = append(b, typ...)
	b = append(b, `","sequence_number":`...)
	b = strconv.AppendInt(b, int64(s.seq), 10)
	b = append(b, body...)
	s.events = append(s.events, append(b, "}\n\n"...))
	s.seq++
}

// indexes is the item and content index members of an event about a part.
func indexes(itemID string, output int) []byte {
	b := append([]byte(`,"item_id":`), AppendJSONString(nil, itemID)...)
	b = append(b, `,"output_index":`...)
	b = strconv.AppendInt(b, int64(output), 10)
	return append(b, `,"content_index":0`...)
}

// item is an output_item.added or .done event's body.
func item(output int, it []byte) []byte {
	b := append([]byte(`,"output_index":`), strconv.AppendInt(nil, int64(output), 10)...)
	b = append(b, `,"item":`...)
	b = append(b, it...)
	return b
}

// responseEvents renders a as a Responses stream: response.created and
// response.in_progress, a reasoning item when there is reasoning, the
// message with its text in pieces of about chunkTokens tokens, then
// response.completed (or response.incomplete).
func responseEvents(id string, created int64, a *Answer, chunkTokens int) [][]byte {
	var s responseStream
	resp := func(b []byte) []byte { return append([]byte(`,"response":`), b...) }
	pending := appendResponseObject(nil, id, created, a, false)
	s.emit("response.created", resp(pending))
	s.emit("response.in_progress", resp(pending))
	rsID, msgID := responseItemIDs(id)
	out := 0
	if a.Reasoning != "" {
		s.emit("response.output_item.added", item(out, appendReasoningItem(nil, rsID, "", "in_progress")))
		for _, piece := range SplitTokens(a.Reasoning, chunkTokens) {
			s.emit("response.reasoning_text.delta", append(append(indexes(rsID, out), `,"delta":`...), AppendJSONString(nil, piece)...))
		}
		s.emit("response.reasoning_text.done", append(append(indexes(rsID, out), `,"text":`...), AppendJSONString(nil, a.Reasoning)...))
		s.emit("response.output_item.done", item(out, appendReasoningItem(nil, rsID, a.Reasoning, "completed")))
		out++
	}
	s.emit("response.output_item.added", item(out, appendMessageItem(nil, msgID, "", "in_progress")))
	s.emit("response.content_part.added", append(append(indexes(msgID, out), `,"part":`...), `{"type":"output_text","text":"","annotations":[],"logprobs":[]}`...))
	for _, piece := range SplitTokens(a.Content, chunkTokens) {
		b := append(indexes(msgID, out), `,"delta":`...)
		b = AppendJSONString(b, piece)
		s.emit("response.output_text.delta", append(b, `,"logprobs":[]`...))
	}
	b := append(indexes(msgID, out), `,"text":`...)
	b = AppendJSONString(b, a.Content)
	s.emit("response.output_text.done", append(b, `,"logprobs":[]`...))
	s.emit("response.content_part.done", appendOutputText(append(indexes(msgID, out), `,"part":`...), a.Content))
	s.emit("response.output_item.done", item(out, appendMessageItem(nil, msgID, a.Content, itemStatus(a))))
	end := "response.completed"
	if a.Finish == "length" {
		end = "response.incomplete"
	}
	s.emit(end, resp(appendResponseObject(nil, id, created, a, true)))
	return s.events
}

// StreamErrorEvent is the event that tells a client its stream broke: for
// chat and completions a data event holding the error envelope, for the
// Responses API an "error" event.
func StreamErrorEvent(ep Endpoint, e *APIError) []byte {
	if ep != EndpointResponses {
		return AppendSSEData(nil, e.AppendJSON(nil))
	}
	b := append([]byte("event: error\ndata: {\"type\":\"error\",\"code\":"), appendNullableString(nil, e.Code)...)
	b = append(b, `,"message":`...)
	b = AppendJSONString(b, e.Message)
	b = append(b, `,"param":null}`...)
	return append(b, "\n\n"...)
}
