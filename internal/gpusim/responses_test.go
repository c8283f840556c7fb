package gpusim

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"
)

// respObject is the part of a response object the tests read.
type respObject struct {
	ID, Object, Status string
	Model              string
	Instructions       *string
	Output             []struct {
		Type, Role, Status string
		Content            []struct{ Type, Text string }
	}
	Usage struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
		TotalTokens  int `json:"total_tokens"`
	}
}

func (r respObject) text() string {
	var sb strings.Builder
	for _, it := range r.Output {
		for _, c := range it.Content {
			sb.WriteString(c.Text)
		}
	}
	return sb.String()
}

// TestResponses: /v1/responses answers with the text chat would give for
// the same prompt (instructions, then input), as a response object or as
// the response.* event sequence ending with response.completed and its
// usage; kept responses are served and deleted by id.
func TestResponses(t *testing.T) {
	s := startServer(t, func(c *Config) { c.OutputTokens = 5 })
	c := newClient(t)
	url := s.URL() + "/v1/responses"
	body := `{"model":"qwen3-8b","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"hello"}]},{"role":"assistant","content":"hi"},{"role":"user","content":"again"}]}`
	prompt := "be brief\nhello\nhi\nagain"
	if PromptText([]byte(body)) != prompt {
		t.Fatalf("prompt text %q", PromptText([]byte(body)))
	}
	r := post(t, c, url, body)
	obj := decode[respObject](t, r.body)
	if r.status != 200 || obj.Object != "response" || obj.Status != "completed" || !strings.HasPrefix(obj.ID, "resp_") ||
		obj.text() != ExpectedText(prompt, 5) || obj.Usage.InputTokens != PromptTokens(prompt) || obj.Usage.OutputTokens != 5 ||
		obj.Instructions == nil || *obj.Instructions != "be brief" {
		t.Fatalf("%d %s", r.status, r.body)
	}

	// Streamed: the same text in deltas, the usage in response.completed.
	resp, cancel := openStream(t, c, url, strings.Replace(body, `{"model"`, `{"stream":true,"max_output_tokens":3,"model"`, 1))
	defer cancel()
	var types []string
	var deltas strings.Builder
	var final respObject
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		if n, ok := strings.CutPrefix(line, "event: "); ok {
			name = n
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type     string
			Sequence int `json:"sequence_number"`
			Delta    string
			Response respObject
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil || ev.Type != name || ev.Sequence != len(types) {
			t.Fatalf("event %q after %q: %v", data, name, err)
		}
		types = append(types, ev.Type)
		deltas.WriteString(ev.Delta)
		if ev.Type == "response.incomplete" {
			final = ev.Response
		}
	}
	want := "response.created,response.in_progress,response.output_item.added,response.content_part.added," +
		"response.output_text.delta,response.output_text.delta,response.output_text.delta," +
		"response.output_text.done,response.content_part.done,response.output_item.done,response.incomplete"
	if strings.Join(types, ",") != want {
		t.Fatalf("events %v", types)
	}
	if deltas.String() != ExpectedText(prompt, 3) || final.text() != deltas.String() || final.Usage.OutputTokens != 3 || final.Status != "incomplete" {
		t.Fatalf("deltas %q, final %+v", deltas.String(), final)
	}

	// Kept for GET and DELETE by id; a follow-up must name a kept one.
	if r := doReq(t, c, "GET", url+"/"+obj.ID, "", nil); r.status != 200 || decode[respObject](t, r.body).ID != obj.ID {
		t.Fatalf("GET: %d %s", r.status, r.body)
	}
	if r := post(t, c, url, `{"model":"qwen3-8b","input":"next","previous_response_id":"`+obj.ID+`"}`); r.status != 200 {
		t.Fatalf("follow-up: %d %s", r.status, r.body)
	}
	if r := doReq(t, c, "DELETE", url+"/"+obj.ID, "", nil); r.status != 200 || !strings.Contains(string(r.body), `"deleted":true`) {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	for _, r := range []reply{doReq(t, c, "GET", url+"/"+obj.ID, "", nil), doReq(t, c, "DELETE", url+"/"+obj.ID, "", nil),
		post(t, c, url, `{"model":"qwen3-8b","input":"next","previous_response_id":"`+obj.ID+`"}`)} {
		if r.status != 404 {
			t.Fatalf("after DELETE: %d %s", r.status, r.body)
		}
	}
	// store: false is not kept.
	r = post(t, c, url, `{"model":"qwen3-8b","input":"x","store":false}`)
	if g := doReq(t, c, "GET", url+"/"+decode[respObject](t, r.body).ID, "", nil); g.status != 404 {
		t.Fatalf("store false kept: %d", g.status)
	}
	if r := post(t, c, url, `{"model":"qwen3-8b"}`); r.status != 400 {
		t.Fatalf("no input: %d %s", r.status, r.body)
	}
}
