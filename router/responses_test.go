package router

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"frontdoor/balancer"
	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
)

// sdkClient is the official Go SDK pointed at base (a gateway or a node).
func sdkClient(base string, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{option.WithBaseURL(base + "/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0)}, opts...)...)
}

// sdkAnswer is what the SDK made of one responses.create: the output
// text, the usage and the headers.
type sdkAnswer struct {
	id, text, status string
	in, out          int64
	events           []string // a stream's event types, in order
	header           http.Header
}

// sdkCreate calls responses.create, non-streaming.
func sdkCreate(t *testing.T, c openai.Client, p responses.ResponseNewParams) sdkAnswer {
	t.Helper()
	var hr *http.Response
	r, err := c.Responses.New(context.Background(), p, option.WithResponseInto(&hr))
	if err != nil {
		t.Fatalf("responses.create: %v", err)
	}
	return sdkAnswer{id: r.ID, text: r.OutputText(), status: string(r.Status), in: r.Usage.InputTokens, out: r.Usage.OutputTokens, header: hr.Header}
}

// sdkStream calls responses.create with stream: true and reads the whole
// stream: the text is the deltas joined, and must equal the text of the
// terminal event's response.
func sdkStream(t *testing.T, c openai.Client, p responses.ResponseNewParams) sdkAnswer {
	t.Helper()
	var hr *http.Response
	s := c.Responses.NewStreaming(context.Background(), p, option.WithResponseInto(&hr))
	defer s.Close()
	var a sdkAnswer
	var deltas strings.Builder
	final := false
	for s.Next() {
		ev := s.Current()
		a.events = append(a.events, ev.Type)
		switch ev.Type {
		case "response.created":
			a.id = ev.Response.ID
		case "response.output_text.delta":
			deltas.WriteString(ev.Delta)
		case "response.completed", "response.incomplete":
			final = true
			a.text, a.status = ev.Response.OutputText(), string(ev.Response.Status)
			a.in, a.out = ev.Response.Usage.InputTokens, ev.Response.Usage.OutputTokens
			if ev.Response.ID != a.id {
				t.Errorf("the terminal event's response id %q is not response.created's %q", ev.Response.ID, a.id)
			}
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("responses.create stream: %v", err)
	}
	if !final {
		t.Fatalf("the stream had no response.completed: %v", a.events)
	}
	if deltas.String() != a.text {
		t.Errorf("the deltas say %q, the final response %q", deltas.String(), a.text)
	}
	if hr != nil {
		a.header = hr.Header
	}
	return a
}

// respParams is a responses.create with a string input and instructions.
func respParams(model, input, instructions string) responses.ResponseNewParams {
	p := responses.ResponseNewParams{Model: model, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(input)}}
	if instructions != "" {
		p.Instructions = openai.String(instructions)
	}
	return p
}

// sameAnswers checks that the SDK gets through the gateway what it gets
// from the node directly, streamed and not, with a string input and with
// a list of messages.
func sameAnswers(t *testing.T, gw, node, model string) {
	t.Helper()
	via, direct := sdkClient(gw), sdkClient(node)
	list := respParams(model, "", "")
	list.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("You answer in one line.", responses.EasyInputMessageRoleSystem),
		responses.ResponseInputItemParamOfMessage("Name a river", responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfMessage("The Nile", responses.EasyInputMessageRoleAssistant),
		responses.ResponseInputItemParamOfMessage("And another one, please", responses.EasyInputMessageRoleUser),
	}}
	short := respParams(model, "Tell me about the sea", "Be brief.")
	short.MaxOutputTokens = openai.Int(3) // cut: status incomplete
	for name, p := range map[string]responses.ResponseNewParams{
		"string": respParams(model, "Tell me about the sea", "Be brief."),
		"list":   list,
		"cut":    short,
	} {
		want := sdkCreate(t, direct, p)
		got := sdkCreate(t, via, p)
		if got.text != want.text || got.status != want.status || got.in != want.in || got.out != want.out || want.text == "" {
			t.Errorf("%s: through frontdoor %+v, from the node %+v", name, got, want)
		}
		if got.header.Get("X-Upstream") == "" {
			t.Errorf("%s: no X-Upstream", name)
		}
		wantS := sdkStream(t, direct, p)
		gotS := sdkStream(t, via, p)
		if gotS.text != wantS.text || gotS.text != want.text || gotS.in != wantS.in || gotS.out != wantS.out {
			t.Errorf("%s, streamed: through frontdoor %q (%d/%d), from the node %q (%d/%d)", name, gotS.text, gotS.in, gotS.out, wantS.text, wantS.in, wantS.out)
		}
		if strings.Join(gotS.events, ",") != strings.Join(wantS.events, ",") {
			t.Errorf("%s: events through frontdoor %v, from the node %v", name, gotS.events, wantS.events)
		}
	}
}

// TestResponsesSDK: the official Go SDK's responses.create, streamed and
// not, gets through frontdoor what it gets from the node directly, from
// gpusim and from llm-d's simulator (an upstream we did not write).
func TestResponsesSDK(t *testing.T) {
	t.Run("gpusim", func(t *testing.T) {
		gw, sims := simAndGateway(t, 1, func(c *sim.Config) { c.TTFT, c.ITL = 5*time.Millisecond, time.Millisecond })
		sameAnswers(t, gw.URL, sims[0].URL(), "qwen3-8b")
	})
	t.Run("llm-d-inference-sim", func(t *testing.T) {
		url := testenv.LLMDSim(t, "qwen3-8b", "--mode", "echo", "--time-to-first-token", "5ms", "--inter-token-latency", "1ms", "--max-num-seqs", "8")
		cfg := testConfig()
		cfg.Nodes = append(cfg.Nodes, testNode("llmd", url))
		gw := startGateway(t, cfg)
		sameAnswers(t, gw.URL, url, "qwen3-8b")
	})
}

// respBody is a Responses request with a string input.
func respBody(input, extra string) string {
	b, _ := json.Marshal(input)
	s := `{"model":"qwen3-8b","input":` + string(b)
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

// postResponses posts a Responses request and decodes the answer.
func postResponses(t *testing.T, gw *testGateway, body string, headers ...string) (*http.Response, map[string]any) {
	t.Helper()
	resp, b := post(t, gw.URL+"/v1/responses", body, headers...)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("status %d, not JSON: %s", resp.StatusCode, b)
	}
	return resp, m
}

// TestResponsesCache: a repeated stateless request is an exact hit, a
// reworded one a semantic hit, each replayed with a fresh id as JSON or as
// a response.* stream the SDK accepts; a stream is written back; requests
// that carry or make state are never answered from the cache.
func TestResponsesCache(t *testing.T) {
	// A conversation reaches a node only with forward_unknown_ids
	// (TestResponsesStateStaysWithTenant has the default).
	gw, node := cacheGateway(t, "memory", func(c *Config) { c.Responses.ForwardUnknownIDs = true })
	c := sdkClient(gw.URL, option.WithAPIKey("sk-acme-1"))
	p := respParams("qwen3-8b", "What is the tallest mountain on Earth?", "You are a geography teacher.")

	miss := sdkCreate(t, c, p)
	if xc := miss.header.Get("X-Cache"); xc != "miss" {
		t.Fatalf("first: X-Cache %q", xc)
	}
	received := node.Stats().Received
	var hit sdkAnswer
	testenv.Eventually(t, 5*time.Second, func() bool {
		hit = sdkCreate(t, c, p)
		return hit.header.Get("X-Cache") == "hit-exact"
	}, "the repeated request never hit")
	if hit.text != miss.text || hit.in != miss.in || hit.out != miss.out || hit.id == miss.id || !strings.HasPrefix(hit.id, "resp_") {
		t.Errorf("hit %+v, miss %+v", hit, miss)
	}
	streamed := sdkStream(t, c, p)
	if streamed.header.Get("X-Cache") != "hit-exact" || streamed.text != miss.text || streamed.id == miss.id {
		t.Errorf("streamed hit: X-Cache %q, %q (%s)", streamed.header.Get("X-Cache"), streamed.text, streamed.id)
	}
	wantEvents := "response.created,response.in_progress,response.output_item.added,response.content_part.added," +
		"response.output_text.delta,response.output_text.done,response.content_part.done,response.output_item.done,response.completed"
	if got := strings.Join(compactDeltas(streamed.events), ","); got != wantEvents {
		t.Errorf("replayed events:\n%s\nwant\n%s", got, wantEvents)
	}
	if n := node.Stats().Received; n != received {
		t.Errorf("hits reached the node: %d requests, want %d", n, received)
	}

	// Reworded: a semantic hit; other instructions: a miss.
	reworded := respParams("qwen3-8b", "what is the tallest mountain on earth", "You are a geography teacher.")
	if a := sdkCreate(t, c, reworded); a.header.Get("X-Cache") != "hit-semantic" || a.text != miss.text {
		t.Errorf("reworded: X-Cache %q, %q", a.header.Get("X-Cache"), a.text)
	}
	if a := sdkCreate(t, c, respParams("qwen3-8b", "What is the tallest mountain on Earth?", "You are a poet.")); a.header.Get("X-Cache") != "miss" {
		t.Errorf("other instructions: X-Cache %q", a.header.Get("X-Cache"))
	}
	// Another tenant never sees it.
	if a := sdkCreate(t, sdkClient(gw.URL, option.WithAPIKey("sk-globex")), p); a.header.Get("X-Cache") != "miss" {
		t.Errorf("another tenant: X-Cache %q", a.header.Get("X-Cache"))
	}

	// A streamed miss is written back and replayed, as a stream and as JSON.
	sp := respParams("qwen3-8b", "Which ocean is the deepest?", "")
	sp.MaxOutputTokens = openai.Int(5) // cut by max_output_tokens: incomplete, replayed so
	first := sdkStream(t, c, sp)
	if first.header.Get("X-Cache") != "miss" {
		t.Fatalf("streamed miss: X-Cache %q", first.header.Get("X-Cache"))
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		a := sdkCreate(t, c, sp)
		return a.header.Get("X-Cache") == "hit-exact" && a.text == first.text && a.in == first.in && a.out == first.out && a.status == "incomplete"
	}, "the streamed answer was not written back")
	if again := sdkStream(t, c, sp); again.events[len(again.events)-1] != "response.incomplete" || again.text != first.text {
		t.Errorf("the cut answer replayed as %v: %q", again.events, again.text)
	}

	// previous_response_id, tools, background, a conversation: bypassed,
	// every time, counted by reason.
	for reason, extra := range map[string]string{
		"previous_response_id": `"previous_response_id":"` + miss.id + `"`,
		"tools":                `"tools":[{"type":"function","name":"lookup","parameters":{"type":"object"}}]`,
		"background":           `"background":true`,
		"server_state":         `"conversation":"conv_1"`,
	} {
		body := respBody("What is the tallest mountain on Earth?", extra+`,"instructions":"You are a geography teacher."`)
		before := metricsText(t, gw)
		for range 2 {
			resp, m := postResponses(t, gw, body, "Authorization", "Bearer sk-acme-1")
			if resp.StatusCode != 200 || resp.Header.Get("X-Cache") != "bypass" {
				t.Errorf("%s: status %d, X-Cache %q: %v", reason, resp.StatusCode, resp.Header.Get("X-Cache"), m)
			}
		}
		series := `frontdoor_cache_requests_total{result="bypass",reason="` + reason + `"}`
		if d := metricValue(t, metricsText(t, gw), series) - metricValue(t, before, series); d != 2 {
			t.Errorf("%s rose by %v, want 2", series, d)
		}
	}
}

// compactDeltas folds runs of the same event type into one.
func compactDeltas(events []string) []string {
	var out []string
	for _, e := range events {
		if len(out) == 0 || out[len(out)-1] != e {
			out = append(out, e)
		}
	}
	return out
}

// testNode is a vLLM node entry serving qwen3-8b at url.
func testNode(name, url string) balancer.NodeConfig {
	return balancer.NodeConfig{Name: name, URL: url, Kind: "vllm", Models: []string{"qwen3-8b"}, MaxConcurrency: 10, Weight: 1}
}

// TestResponsesUsageAndErrors: the tokens of a Responses answer are
// counted from its usage (a stream's from response.completed), and a bad
// request is a 4xx in OpenAI's error shape before any node sees it.
func TestResponsesUsageAndErrors(t *testing.T) {
	gw, sims := simAndGateway(t, 1, nil)
	c := sdkClient(gw.URL)
	tokens := func(kind string) float64 {
		return metricValue(t, metricsText(t, gw), `frontdoor_tokens_total{tenant="default",kind="`+kind+`",source="upstream"}`)
	}
	for _, stream := range []bool{false, true} {
		in0, out0 := tokens("prompt"), tokens("completion")
		p := respParams("qwen3-8b", "Count my tokens, please", "Be exact.")
		var a sdkAnswer
		if stream {
			a = sdkStream(t, c, p)
		} else {
			a = sdkCreate(t, c, p)
		}
		if a.in == 0 || a.out == 0 {
			t.Fatalf("no usage in the answer: %+v", a)
		}
		testenv.Eventually(t, 5*time.Second, func() bool {
			return tokens("prompt")-in0 == float64(a.in) && tokens("completion")-out0 == float64(a.out)
		}, "stream=%v: tokens counted %v/%v, the answer's usage %d/%d", stream, tokens("prompt")-in0, tokens("completion")-out0, a.in, a.out)
	}

	received := sims[0].Stats().Received
	for name, c := range map[string]struct {
		body, param, code string
	}{
		"no input":           {`{"model":"qwen3-8b"}`, "input", ""},
		"empty input list":   {`{"model":"qwen3-8b","input":[]}`, "input", ""},
		"input a number":     {`{"model":"qwen3-8b","input":3}`, "input", ""},
		"item not an object": {`{"model":"qwen3-8b","input":["hi"]}`, "input[0]", ""},
		"bad role":           {`{"model":"qwen3-8b","input":[{"role":"robot","content":"hi"}]}`, "input[0].role", ""},
		"no content":         {`{"model":"qwen3-8b","input":[{"role":"user"}]}`, "input[0].content", ""},
		"bad part":           {`{"model":"qwen3-8b","input":[{"role":"user","content":[{"type":"input_text","text":3}]}]}`, "input[0].content[0].text", ""},
		"unknown part":       {`{"model":"qwen3-8b","input":[{"role":"user","content":[{"type":"mystery"}]}]}`, "input[0].content[0].type", ""},
		"instructions":       {`{"model":"qwen3-8b","input":"hi","instructions":["x"]}`, "instructions", ""},
		"max_output_tokens":  {`{"model":"qwen3-8b","input":"hi","max_output_tokens":0}`, "max_output_tokens", ""},
		"store":              {`{"model":"qwen3-8b","input":"hi","store":"yes"}`, "store", ""},
		"previous id":        {`{"model":"qwen3-8b","input":"hi","previous_response_id":""}`, "previous_response_id", ""},
		"function tool":      {`{"model":"qwen3-8b","input":"hi","tools":[{"type":"function"}]}`, "tools[0].name", ""},
		"duplicate key":      {`{"model":"qwen3-8b","input":"hi","input":"bye"}`, "input", "duplicate_key"},
		"temperature":        {`{"model":"qwen3-8b","input":"hi","temperature":9}`, "temperature", ""},
	} {
		resp, b := post(t, gw.URL+"/v1/responses", c.body)
		var env struct {
			Error struct {
				Message, Type string
				Param, Code   *string
			}
		}
		if err := json.Unmarshal(b, &env); err != nil || resp.StatusCode != 400 || env.Error.Type != "invalid_request_error" || env.Error.Message == "" {
			t.Errorf("%s: %d %s", name, resp.StatusCode, b)
			continue
		}
		if env.Error.Param == nil || *env.Error.Param != c.param || (c.code != "" && (env.Error.Code == nil || *env.Error.Code != c.code)) {
			t.Errorf("%s: param/code of %s, want %q/%q", name, b, c.param, c.code)
		}
	}
	if n := sims[0].Stats().Received; n != received {
		t.Errorf("bad requests reached the node: %d, want %d", n, received)
	}
	if resp, b := post(t, gw.URL+"/v1/responses", `{"model":"nope","input":"hi"}`); resp.StatusCode != 404 || !strings.Contains(string(b), "model_not_found") {
		t.Errorf("unknown model: %d %s", resp.StatusCode, b)
	}
}

// TestResponsesRetry: a node that fails before its first byte is retried
// on another, streamed and not.
func TestResponsesRetry(t *testing.T) {
	broken, good := testenv.GPUSim(t, func(c *sim.Config) { c.FailRate = 1 }), testenv.GPUSim(t, nil)
	cfg := testConfig(broken, good)
	cfg.Balancer.Policy = "round_robin"
	cfg.Balancer.Breaker.Failures = 100 // keep trying the broken node first half the time
	gw := startGateway(t, cfg)
	c := sdkClient(gw.URL)
	retried := 0
	for i := range 4 {
		p := respParams("qwen3-8b", "retry me", "")
		var a sdkAnswer
		if i%2 == 0 {
			a = sdkCreate(t, c, p)
		} else {
			a = sdkStream(t, c, p)
		}
		if a.header.Get("X-Upstream") != "gpu-b" || a.text == "" {
			t.Fatalf("%d: answered by %q: %+v", i, a.header.Get("X-Upstream"), a)
		}
		if a.header.Get("X-Upstream-Attempts") == "2" {
			retried++
		}
	}
	if retried == 0 || broken.Stats().Failed == 0 {
		t.Fatalf("no request was retried (%d failures on the broken node)", broken.Stats().Failed)
	}
}
