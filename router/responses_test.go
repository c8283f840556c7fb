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
	gw, node := cacheGateway(t, "memory", nil)
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

// byID sends method to url with the tenant's key and decodes the
// answer.
func byID(t *testing.T, method, url, key string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("%s %s: status %d, not JSON: %v", method, url, resp.StatusCode, err)
	}
	return resp, m
}

// TestResponsesByID: GET and DELETE /v1/responses/{id} and a follow-up's
// previous_response_id go to the node that created the response; ids of
// another tenant, of responses not stored, or unknown, are a clean 404;
// a response the cache served is rendered again from its entry.
func TestResponsesByID(t *testing.T) {
	a, b := testenv.GPUSim(t, nil), testenv.GPUSim(t, nil)
	cfg := testConfig(a, b)
	cfg.Cache.Backend = "memory"
	cfg.Balancer.Policy = "round_robin" // each node creates some; a follow-up not pinned would reach the other one half the time
	t.Setenv("TEST_ACME_KEYS", "sk-acme-1")
	t.Setenv("TEST_GLOBEX_KEYS", "sk-globex")
	cfg.Tenants = []Tenant{{Name: "acme", APIKeysEnv: "TEST_ACME_KEYS"}, {Name: "globex", APIKeysEnv: "TEST_GLOBEX_KEYS"}}
	gw := startGateway(t, cfg)
	nodeURL := map[string]string{"gpu-a": a.URL(), "gpu-b": b.URL()}
	acme := []string{"Authorization", "Bearer sk-acme-1"}

	created := map[string]string{} // id -> node
	for i := range 8 {
		extra := `"max_output_tokens":8` // no-store: each goes to a node
		if i%2 == 1 {
			extra += `,"stream":true`
		}
		resp, raw := post(t, gw.URL+"/v1/responses", respBody("question number "+strings.Repeat("x", i), extra), append(acme, "Cache-Control", "no-store")...)
		if resp.StatusCode != 200 {
			t.Fatalf("create: %d %s", resp.StatusCode, raw)
		}
		id := ""
		if i%2 == 1 {
			_, after, _ := strings.Cut(string(raw), `"response":{"id":"`)
			id, _, _ = strings.Cut(after, `"`)
		} else {
			var m struct{ ID string }
			_ = json.Unmarshal(raw, &m)
			id = m.ID
		}
		if id == "" {
			t.Fatalf("no id in %s", raw)
		}
		created[id] = resp.Header.Get("X-Upstream")
	}
	nodes := map[string]bool{}
	for id, node := range created {
		nodes[node] = true
		resp, got := byID(t, "GET", gw.URL+"/v1/responses/"+id, "sk-acme-1")
		_, want := byID(t, "GET", nodeURL[node]+"/v1/responses/"+id, "")
		if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != node || got["id"] != id || !equalJSON(got, want) {
			t.Errorf("GET %s: %d from %q, want the node %s's answer", id, resp.StatusCode, resp.Header.Get("X-Upstream"), node)
		}
		// A follow-up goes to the node that holds its predecessor (the
		// other node answers 404 to it).
		fr, fm := postResponses(t, gw, respBody("and then?", `"previous_response_id":"`+id+`"`), acme...)
		if fr.StatusCode != 200 || fr.Header.Get("X-Upstream") != node {
			t.Errorf("follow-up of %s: %d from %q, want 200 from %s: %v", id, fr.StatusCode, fr.Header.Get("X-Upstream"), node, fm)
		}
		// Another tenant does not see it.
		if resp, m := byID(t, "GET", gw.URL+"/v1/responses/"+id, "sk-globex"); resp.StatusCode != 404 || m["error"] == nil {
			t.Errorf("another tenant's GET: %d %v", resp.StatusCode, m)
		}
	}
	if len(nodes) != 2 {
		t.Fatalf("all 8 responses came from %v: the test needs both nodes", nodes)
	}
	for id := range created {
		if resp, m := byID(t, "DELETE", gw.URL+"/v1/responses/"+id, "sk-acme-1"); resp.StatusCode != 200 || m["deleted"] != true {
			t.Errorf("DELETE %s: %d %v", id, resp.StatusCode, m)
		}
		if resp, _ := byID(t, "GET", gw.URL+"/v1/responses/"+id, "sk-acme-1"); resp.StatusCode != 404 {
			t.Errorf("GET after DELETE: %d", resp.StatusCode)
		}
		break
	}
	resp, m := byID(t, "GET", gw.URL+"/v1/responses/resp_unknown", "sk-acme-1")
	if e, _ := m["error"].(map[string]any); resp.StatusCode != 404 || e["type"] != "invalid_request_error" || !strings.Contains(e["message"].(string), "resp_unknown") {
		t.Errorf("unknown id: %d %v", resp.StatusCode, m)
	}
	// store: false: kept by no one, so not remembered.
	_, m = postResponses(t, gw, respBody("forget me", `"store":false`), acme...)
	if resp, _ := byID(t, "GET", gw.URL+"/v1/responses/"+m["id"].(string), "sk-acme-1"); resp.StatusCode != 404 {
		t.Errorf("a store:false response: GET %d", resp.StatusCode)
	}

	// A response the cache served: GET renders it from its entry, DELETE
	// forgets the id.
	askResp := func() (*http.Response, map[string]any) {
		return postResponses(t, gw, respBody("a cached question", ""), acme...)
	}
	askResp()
	var hit map[string]any
	testenv.Eventually(t, 5*time.Second, func() bool {
		r, m := askResp()
		hit = m
		return r.Header.Get("X-Cache") == "hit-exact"
	}, "no hit")
	hitID := hit["id"].(string)
	resp, got := byID(t, "GET", gw.URL+"/v1/responses/"+hitID, "sk-acme-1")
	if resp.StatusCode != 200 || !equalJSON(got, hit) || resp.Header.Get("X-Upstream") != "cache" {
		t.Errorf("GET of a cache-served response: %d %v, want %v", resp.StatusCode, got, hit)
	}
	// A follow-up of it: no node holds it, so frontdoor sends the
	// conversation (its input, its answer, then the new input) instead.
	a.ResetRecorded()
	b.ResetRecorded()
	fr, fm := postResponses(t, gw, respBody("and then?", `"previous_response_id":"`+hitID+`"`), acme...)
	if fr.StatusCode != 200 || fr.Header.Get("X-Cache") != "bypass" {
		t.Errorf("follow-up of a cache-served response: %d %q %v", fr.StatusCode, fr.Header.Get("X-Cache"), fm)
	}
	sent := append(a.Requests(), b.Requests()...)
	hitText := hit["output"].([]any)[0].(map[string]any)["content"].([]any)[0].(map[string]any)["text"].(string)
	want := `{"model":"qwen3-8b","input":[{"role":"user","content":"a cached question"},{"role":"assistant","content":` + string(mustJSON(hitText)) + `},{"role":"user","content":"and then?"}]}`
	if len(sent) != 1 || string(sent[0].Body) != want {
		t.Errorf("the follow-up reached the nodes as %d requests: %s\nwant %s", len(sent), firstBody(sent), want)
	}
	if resp, m := byID(t, "DELETE", gw.URL+"/v1/responses/"+hitID, "sk-acme-1"); resp.StatusCode != 200 || m["deleted"] != true {
		t.Errorf("DELETE of a cache-served response: %d %v", resp.StatusCode, m)
	}
	if resp, _ := byID(t, "GET", gw.URL+"/v1/responses/"+hitID, "sk-acme-1"); resp.StatusCode != 404 {
		t.Errorf("GET after DELETE of a cache-served response: %d", resp.StatusCode)
	}

	// Paths and methods.
	if resp, _ := byID(t, "PUT", gw.URL+"/v1/responses/resp_x", "sk-acme-1"); resp.StatusCode != 405 {
		t.Errorf("PUT: %d", resp.StatusCode)
	}
	if resp, _ := byID(t, "GET", gw.URL+"/v1/responses/resp_x/other", "sk-acme-1"); resp.StatusCode != 404 {
		t.Errorf("an unknown sub-path: %d", resp.StatusCode)
	}
	text := metricsText(t, gw)
	for series, least := range map[string]float64{`frontdoor_responses_by_id_total{result="found"}`: 10, `frontdoor_responses_by_id_total{result="unknown"}`: 10} {
		if v := metricValue(t, text, series); v < least {
			t.Errorf("%s = %v, want at least %v", series, v, least)
		}
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func firstBody(reqs []sim.RecordedRequest) string {
	if len(reqs) == 0 {
		return "(none)"
	}
	return string(reqs[0].Body)
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

// TestResponsesSpill: a Responses request no node answers spills to the
// hosted API (its model mapped there and back), streamed and not, and a
// GET of its id goes there too; with spillover.responses off it is a 503,
// counted.
func TestResponsesSpill(t *testing.T) {
	broken := testenv.GPUSim(t, func(c *sim.Config) { c.FailRate = 1 })
	dash := dashSim(t, nil)
	cfg := testConfig(broken)
	spillConfig(t, &cfg, dash)
	gw := startGateway(t, cfg)
	c := sdkClient(gw.URL)
	p := respParams("qwen3-8b", "Where do overflow requests go?", "")
	for _, stream := range []bool{false, true} {
		var a sdkAnswer
		if stream {
			a = sdkStream(t, c, p)
		} else {
			a = sdkCreate(t, c, p)
		}
		// The first tries the node, which fails; by the second it is marked
		// unhealthy and the request goes to the hosted API at once.
		if a.header.Get("X-Upstream") != "spillover:dashscope" || a.header.Get("X-Upstream-Attempts") == "" || a.text == "" {
			t.Fatalf("stream=%v: X-Upstream %q after %q attempts: %+v", stream, a.header.Get("X-Upstream"), a.header.Get("X-Upstream-Attempts"), a)
		}
		resp, got := byID(t, "GET", gw.URL+"/v1/responses/"+a.id, "")
		if resp.StatusCode != 200 || got["id"] != a.id || got["model"] != "qwen3-8b" && got["model"] != "qwen-plus" || resp.Header.Get("X-Upstream") != "spillover:dashscope" {
			t.Errorf("GET of a spilled response: %d %v", resp.StatusCode, got)
		}
	}
	paths := map[string]int{}
	for _, r := range dash.Requests() {
		paths[r.Path]++
		if r.Path == "/compatible-mode/v1/responses" && !strings.Contains(string(r.Body), `"model":"qwen-plus"`) {
			t.Errorf("the hosted API got %s", r.Body)
		}
	}
	if paths["/compatible-mode/v1/responses"] != 2 {
		t.Errorf("the hosted API was asked %v", paths)
	}

	cfg.Spillover.Responses = false
	off := startGateway(t, cfg)
	resp, b := post(t, off.URL+"/v1/responses", respBody("no spill for me", ""))
	if resp.StatusCode != 503 || !strings.Contains(string(b), "spillover.responses") {
		t.Errorf("spillover.responses false: %d %s", resp.StatusCode, b)
	}
	if v := metricValue(t, metricsText(t, off), `frontdoor_spillover_skipped_total{reason="endpoint"}`); v != 1 {
		t.Errorf("frontdoor_spillover_skipped_total = %v, want 1", v)
	}
	if resp, b := post(t, off.URL+"/v1/chat/completions", chatBody("chat still spills", "")); resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "spillover:dashscope" {
		t.Errorf("chat with spillover.responses false: %d %s", resp.StatusCode, b)
	}
}

// TestResponsesSharedAcrossReplicas: with the cache on Redis, a response
// passed on by one replica is found by another (GET, follow-up, DELETE);
// with Redis down each replica knows its own, and says so.
func TestResponsesSharedAcrossReplicas(t *testing.T) {
	a, b := testenv.GPUSim(t, nil), testenv.GPUSim(t, nil)
	cfg := testConfig(a, b)
	r := testenv.StartRedis(t)
	cfg.Cache.Backend, cfg.Cache.VectorSearch, cfg.Redis.URL = "redis", "local", r.URL()
	cfg.Balancer.Policy = "round_robin"
	one, two := startGateway(t, cfg), startGateway(t, cfg)
	for i := range 4 {
		resp, m := postResponses(t, one, respBody([]string{"Why is the sky blue?", "How do bees make honey?", "Who built the pyramids?", "What is a black hole?"}[i], ""))
		if resp.StatusCode != 200 {
			t.Fatalf("%d: create: %d %v", i, resp.StatusCode, m)
		}
		id, node := m["id"].(string), resp.Header.Get("X-Upstream")
		if g, got := byID(t, "GET", two.URL+"/v1/responses/"+id, ""); g.StatusCode != 200 || got["id"] != id || g.Header.Get("X-Upstream") != node {
			t.Fatalf("%d: GET on the other replica: %d from %q, want %s", i, g.StatusCode, g.Header.Get("X-Upstream"), node)
		}
		if f, fm := postResponses(t, two, respBody("and then?", `"previous_response_id":"`+id+`"`)); f.StatusCode != 200 || f.Header.Get("X-Upstream") != node {
			t.Fatalf("%d: follow-up on the other replica: %d from %q, want %s: %v", i, f.StatusCode, f.Header.Get("X-Upstream"), node, fm)
		}
		if i == 0 {
			if d, _ := byID(t, "DELETE", two.URL+"/v1/responses/"+id, ""); d.StatusCode != 200 {
				t.Fatalf("DELETE on the other replica: %d", d.StatusCode)
			}
			if g, _ := byID(t, "GET", one.URL+"/v1/responses/"+id, ""); g.StatusCode != 404 {
				t.Fatalf("GET after DELETE elsewhere: %d", g.StatusCode)
			}
		}
	}
	r.Kill()
	_, m := postResponses(t, one, respBody("while Redis is down", ""))
	id := m["id"].(string)
	if g, _ := byID(t, "GET", one.URL+"/v1/responses/"+id, ""); g.StatusCode != 200 {
		t.Errorf("GET on the same replica with Redis down: %d", g.StatusCode)
	}
	if g, _ := byID(t, "GET", two.URL+"/v1/responses/"+id, ""); g.StatusCode != 404 {
		t.Errorf("GET on the other replica with Redis down: %d", g.StatusCode)
	}
	if v := metricValue(t, metricsText(t, one), `frontdoor_responses_shared_errors_total{op="put"}`); v < 1 {
		t.Errorf("put errors %v", v)
	}
	if v := metricValue(t, metricsText(t, two), `frontdoor_responses_shared_errors_total{op="get"}`); v < 1 {
		t.Errorf("get errors %v", v)
	}
	if !strings.Contains(two.Logs.String(), "shared id records in Redis failed") {
		t.Error("no WARN line for the failing Redis")
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
