package adapters

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

func TestParseResponsesRequest(t *testing.T) {
	body := `{"model":"m","input":[{"role":"developer","content":"rules"},{"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"u"}]},
		{"type":"function_call_output","call_id":"c1","output":"42"}],"instructions":"be kind","previous_response_id":"resp_1","store":false,
		"background":true,"max_output_tokens":30,"tools":[{"type":"function","name":"f"},{"type":"web_search"}],"tool_choice":"auto","stream":true,
		"text":{"format":{"type":"text"}},"reasoning":{"effort":"low"},"include":["reasoning.encrypted_content"],"truncation":"auto","x_vendor":1}`
	r, apiErr := ParseRequest(EndpointResponses, []byte(body))
	if apiErr != nil {
		t.Fatalf("refused: %v", apiErr)
	}
	defer r.Release()
	if r.Model != "m" || !r.Stream || r.IncludeUsage || r.MaxTokens != 30 || !r.Multimodal || !r.HasTools ||
		r.PreviousResponseID != "resp_1" || !r.StoreOff || !r.Background || r.ServerState {
		t.Fatalf("fields: %+v", r)
	}
	if got := r.PromptText(); got != "be kind\nrules\na\n42" {
		t.Fatalf("prompt text %q", got)
	}
	if r.SystemPromptHash() == 0 {
		t.Fatal("instructions give no affinity hash")
	}
	if string(r.UpstreamBody("m")) != body {
		t.Fatal("a Responses stream needs no stream_options: the body goes as it came")
	}
	var roles []string
	r.WalkPrompt(func(role []byte) { roles = append(roles, string(role)) }, func([]byte) {})
	if !reflect.DeepEqual(roles, []string{"system", "developer", "user", "function_call_output"}) {
		t.Fatalf("roles %q", roles)
	}

	for _, in := range []string{`{"model":"m","input":"x","conversation":"conv_1"}`, `{"model":"m","input":"x","prompt":{"id":"pmpt_1"}}`,
		`{"model":"m","input":[{"type":"item_reference","id":"msg_1"}]}`} {
		r, apiErr := ParseRequest(EndpointResponses, []byte(in))
		if apiErr != nil || !r.ServerState {
			t.Fatalf("%s: %v, server state %v", in, apiErr, r != nil && r.ServerState)
		}
		r.Release()
	}
	// The chat fields of the same name are not the Responses API's.
	if _, apiErr := ParseRequest(EndpointResponses, []byte(`{"model":"m","input":"x","tools":[{"type":"function","function":{"name":"f"}}]}`)); apiErr == nil || apiErr.Param != "tools[0].name" {
		t.Fatalf("a chat-shaped tool: %v", apiErr)
	}
	if r, apiErr := ParseRequest(EndpointResponses, []byte(`{"model":"m","input":"x","prompt":null,"messages":3}`)); apiErr != nil {
		t.Fatalf("fields of other endpoints must be left alone: %v", apiErr)
	} else {
		r.Release()
	}
}

func TestContinueInlinesThePredecessor(t *testing.T) {
	for _, c := range []struct{ prev, now, want string }{
		{`"hi"`, `"and then?"`, `[{"role":"user","content":"hi"},{"role":"assistant","content":"hello \"you\""},{"role":"user","content":"and then?"}]`},
		{`[{"role":"system","content":"s"},{"role":"user","content":"q"}]`, `[{"role":"user","content":[{"type":"input_text","text":"more"}]}]`,
			`[{"role":"system","content":"s"},{"role":"user","content":"q"},{"role":"assistant","content":"hello \"you\""},{"role":"user","content":[{"type":"input_text","text":"more"}]}]`},
	} {
		r, apiErr := ParseRequest(EndpointResponses, []byte(`{"model":"m","previous_response_id":"resp_1","input":`+c.now+`,"store":false}`))
		if apiErr != nil {
			t.Fatal(apiErr)
		}
		if err := r.Continue([]byte(c.prev), `hello "you"`); err != nil {
			t.Fatal(err)
		}
		want := `{"model":"m","input":` + c.want + `,"store":false}`
		if got := string(r.UpstreamBody("m")); got != want {
			t.Errorf("got  %s\nwant %s", got, want)
		}
		if r.PreviousResponseID != "resp_1" {
			t.Error("a continued request is still a follow-up")
		}
		r.Release()
	}
}

// replayCases are answers a replay must give back exactly.
var replayCases = []*Answer{
	{Model: "m", Content: "one two three four five", Finish: "stop", Usage: Usage{3, 5, 8, 3}},
	{Model: "m", Content: "中文回答，没有空格。\n\"quoted\" \\ and \t tabs", Reasoning: "think first", Finish: "stop", Usage: Usage{1, 2, 3, 0}},
	{Model: "m/with/slashes", Content: "cut short", Finish: "length", Usage: Usage{4, 2, 6, 1}},
	{Model: "m", Content: "", Finish: "stop", Usage: Usage{1, 0, 1, 0}},
}

// TestResponseReplayRoundTrip: a replayed response, as JSON or as events,
// reads back as the answer it came from, and has OpenAI's event sequence.
func TestResponseReplayRoundTrip(t *testing.T) {
	for _, a := range replayCases {
		body := AppendCompletionJSON(nil, EndpointResponses, "resp_abc", 1700000000, a)
		if err := checkResponseObject(body); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		back, err := ParseAnswer(EndpointResponses, body)
		if err != nil || !reflect.DeepEqual(back, a) {
			t.Fatalf("JSON round trip: %+v (%v), want %+v", back, err, a)
		}
		events := StreamEvents(EndpointResponses, "resp_abc", 1700000000, a, 2, false)
		stream := bytes.Join(events, nil)
		asm := NewAssembler(EndpointResponses)
		sr := NewSSEReader(bytes.NewReader(stream))
		var types []string
		seq := 0
		for {
			ev, err := sr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			v := fastjson.MustParseBytes(ev.Data)
			if string(v.GetStringBytes("type")) != string(ev.Name) || v.GetInt("sequence_number") != seq {
				t.Fatalf("event %d: name %q, data %s", seq, ev.Name, ev.Data)
			}
			seq++
			types = append(types, string(ev.Name))
			asm.Add(&ev)
		}
		back, err = asm.Answer()
		if err != nil || !reflect.DeepEqual(back, a) {
			t.Fatalf("stream round trip: %+v (%v), want %+v\n%s", back, err, a, stream)
		}
		end := "response.completed"
		if a.Finish == "length" {
			end = "response.incomplete"
		}
		if types[0] != "response.created" || types[1] != "response.in_progress" || types[len(types)-1] != end {
			t.Fatalf("events %v", types)
		}
		if a.Reasoning != "" && !strings.Contains(strings.Join(types, ","), "response.reasoning_text.delta") {
			t.Fatalf("reasoning not replayed: %v", types)
		}
		js, err := StreamToJSON(EndpointResponses, stream)
		if err != nil || !jsonEqual(js, body) {
			t.Fatalf("StreamToJSON: %s (%v), want %s", js, err, body)
		}
	}
}

func TestResponseAnswersNotStored(t *testing.T) {
	ok := `{"id":"r","status":"completed","model":"m","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"x"}]}],"usage":{"input_tokens":1,"output_tokens":1}}`
	if a, err := ParseAnswer(EndpointResponses, []byte(ok)); err != nil || a.Content != "x" || a.Usage != (Usage{1, 1, 2, 0}) {
		t.Fatalf("%+v %v", a, err)
	}
	for name, body := range map[string]string{
		"function call": strings.Replace(ok, `{"type":"message"`, `{"type":"function_call","name":"f","arguments":"{}"},{"type":"message"`, 1),
		"refusal":       strings.Replace(ok, `"output_text","text":"x"`, `"refusal","refusal":"no"`, 1),
		"citations":     strings.Replace(ok, `"text":"x"`, `"text":"x","annotations":[{"type":"url_citation"}]`, 1),
		"failed":        strings.Replace(ok, `"completed"`, `"failed"`, 1),
		"two messages":  strings.Replace(ok, `"output":[`, `"output":[{"type":"message","role":"assistant","content":[]},`, 1),
		"summary":       strings.Replace(ok, `"output":[`, `"output":[{"type":"reasoning","summary":[{"type":"summary_text","text":"s"}]},`, 1),
		"no message":    `{"status":"completed","output":[]}`,
		"other cut":     strings.Replace(ok, `"status":"completed"`, `"status":"incomplete","incomplete_details":{"reason":"content_filter"}`, 1),
	} {
		if _, err := ParseAnswer(EndpointResponses, []byte(body)); !errors.Is(err, ErrNotAssembled) {
			t.Errorf("%s: %v", name, err)
		}
	}
	events := StreamEvents(EndpointResponses, "resp_1", 1, replayCases[0], 4, false)
	stream := func(evs ...[]byte) error {
		asm := NewAssembler(EndpointResponses)
		sr := NewSSEReader(bytes.NewReader(bytes.Join(evs, nil)))
		for {
			ev, err := sr.Next()
			if err != nil {
				break
			}
			asm.Add(&ev)
		}
		_, err := asm.Answer()
		return err
	}
	last := len(events) - 1
	if err := stream(events[:last]...); !errors.Is(err, ErrStreamIncomplete) {
		t.Errorf("no terminal event: %v", err)
	}
	errEv := StreamErrorEvent(EndpointResponses, UpstreamError("cut"))
	if err := stream(append(append(events[:2:2], errEv), events[2:]...)...); !errors.Is(err, ErrStreamError) {
		t.Errorf("an error event: %v", err)
	}
	if err := stream(append(events[:len(events):len(events)], events[3])...); !errors.Is(err, ErrStreamError) {
		t.Errorf("an event after the terminal one: %v", err)
	}
	if err := stream(append(events[:len(events):len(events)], AppendSSEDone(nil))...); err != nil {
		t.Errorf("a [DONE] after the terminal event: %v", err)
	}
	var e struct{ Type, Code, Message string }
	if _, data, _ := strings.Cut(string(errEv), "data: "); json.Unmarshal([]byte(data), &e) != nil || e.Type != "error" || e.Code != "upstream_error" {
		t.Errorf("error event %q", errEv)
	}
}

func TestReadResponseEvent(t *testing.T) {
	events := StreamEvents(EndpointResponses, "resp_xyz", 1, replayCases[0], 4, false)
	var ids []string
	var usage Usage
	for _, raw := range events {
		ev, _ := NewSSEReader(bytes.NewReader(raw)).Next()
		if re, ok := ReadResponseEvent(&ev); ok {
			ids = append(ids, re.ID)
			if re.Terminal {
				usage = re.Usage
			}
		}
		ev.Name = nil // a server that names no events
		if re, ok := ReadResponseEvent(&ev); ok && re.ID != "resp_xyz" {
			t.Fatalf("unnamed: %+v", re)
		}
	}
	if len(ids) != 3 || ids[0] != "resp_xyz" || usage != replayCases[0].Usage {
		t.Fatalf("ids %v usage %+v", ids, usage)
	}
}

func TestDashScopeResponsesURL(t *testing.T) {
	if got := DashScopeResponsesURL(DashScopeRegions["singapore"] + "/"); got != "https://dashscope-intl.aliyuncs.com/api/v2/apps/protocols/compatible-mode/v1/responses" {
		t.Fatal(got)
	}
	if got := DashScopeResponsesURL("http://127.0.0.1:9/compatible-mode/v1"); got != "" {
		t.Fatal(got)
	}
	b, err := NewDashScope(Target{Name: "d", URL: DashScopeRegions["beijing"], ResponsesURL: DashScopeResponsesURL(DashScopeRegions["beijing"])}, DefaultConfig(), nil)
	if err != nil || b.uris[EndpointResponses] != "https://dashscope.aliyuncs.com/api/v2/apps/protocols/compatible-mode/v1/responses" {
		t.Fatalf("%v %v", err, b)
	}
	if _, err := NewHTTPBackend(Target{Name: "x", URL: "http://a:1", ResponsesURL: "http://b:1/responses"}, DefaultConfig()); err == nil {
		t.Fatal("a Responses URL on another host was taken")
	}
}

// FuzzParseResponsesRequest: no input panics the Responses reading; an
// accepted request keeps the invariants the gateway relies on, and its
// body (continued or not) stays JSON.
func FuzzParseResponsesRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","input":"hi","instructions":"s","stream":true}`))
	f.Add([]byte(`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"}]},{"type":"function_call_output","call_id":"c","output":"o"}],"tools":[{"type":"function","name":"f"}]}`))
	f.Add([]byte(`{"model":"m","input":"x","previous_response_id":"resp_1","store":false,"background":true,"max_output_tokens":5}`))
	f.Add([]byte(`{"model":"m","input":[{"type":"item_reference","id":"i"}],"conversation":{"id":"c"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, apiErr := ParseRequest(EndpointResponses, body)
		if apiErr != nil {
			if apiErr.Status != 400 || apiErr.Message == "" || !json.Valid(apiErr.AppendJSON(nil)) {
				t.Fatalf("bad error %+v", apiErr)
			}
			return
		}
		defer r.Release()
		if r.Model == "" || r.MaxTokens < 0 || r.Root().Get("input") == nil {
			t.Fatalf("accepted request breaks invariants: %+v", r)
		}
		_ = r.PromptText()
		_ = r.SystemPromptHash()
		r.WalkPrompt(func([]byte) {}, func([]byte) {})
		if err := r.Continue([]byte(`[{"role":"user","content":"before"}]`), "answer"); err != nil {
			t.Fatal(err)
		}
		if out := r.UpstreamBody("other"); !json.Valid(out) || fastjson.GetString(out, "model") != "other" || fastjson.Exists(out, "previous_response_id") {
			t.Fatalf("continued body: %s", out)
		}
	})
}

// FuzzResponseStream: whatever a node streams, reading it never panics; an
// answer assembled from it replays as a stream that assembles to the same
// answer.
func FuzzResponseStream(f *testing.F) {
	for _, a := range replayCases {
		f.Add(bytes.Join(StreamEvents(EndpointResponses, "resp_s", 1, a, 3, false), nil))
	}
	f.Add([]byte("event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"output\":[]}}\n\n"))
	f.Add([]byte("data: {\"type\":\"error\"}\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		asm := NewAssembler(EndpointResponses)
		sr := NewSSEReader(bytes.NewReader(b))
		for {
			ev, err := sr.Next()
			if err != nil {
				break
			}
			_, _ = ReadResponseEvent(&ev)
			asm.Add(&ev)
		}
		if js, err := StreamToJSON(EndpointResponses, b); err == nil && !json.Valid(js) {
			t.Fatalf("StreamToJSON gave %q", js)
		}
		a, err := asm.Answer()
		if err != nil || a == nil {
			return
		}
		asm2 := NewAssembler(EndpointResponses)
		for _, raw := range StreamEvents(EndpointResponses, "resp_r", 2, a, 2, false) {
			ev, err := NewSSEReader(bytes.NewReader(raw)).Next()
			if err != nil {
				t.Fatalf("replayed event %q: %v", raw, err)
			}
			asm2.Add(&ev)
		}
		if back, err := asm2.Answer(); err != nil || !reflect.DeepEqual(back, a) {
			t.Fatalf("replay of %+v assembled to %+v (%v)", a, back, err)
		}
	})
}
