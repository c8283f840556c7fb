package warm

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseLikeRefusesWhatCannotBeWarmed(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`[1,2]`, "not a chat request"},
		{`{"model":"m"}`, `no "messages" array`},
		{`{"model":"m","messages":[{"role":"assistant","content":"hi"}]}`, "no user message"},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, "not text"},
		{`{"messages":[{"role":"user","content":"q"}]}`, `no "model"`},
	} {
		if _, err := ParseLike([]byte(c.body)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.body, err, c.want)
		}
	}
}

// The prompt takes the place of the last user message only; every other
// field and message stays as the app sends it, but the transport-only ones.
func TestLikeRequestKeepsAllButTheQuestion(t *testing.T) {
	like, err := ParseLike([]byte(`{"model":"m","temperature":0.2,"top_p":0.9,"stream":true,"stream_options":{"include_usage":true},
		"messages":[{"role":"system","content":"S"},{"role":"user","content":"first"},{"role":"assistant","content":"A"},
		{"role":"user","content":[{"type":"text","text":"old"}],"name":"u1"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	items, _, err := Parse("p.txt", []byte("the new question\n"), Defaults{Model: like.Model(), Like: like})
	if err != nil || len(items) != 1 || items[0].Err != nil {
		t.Fatalf("%v %+v", err, items)
	}
	var got map[string]any
	_ = json.Unmarshal(items[0].Request, &got)
	want := `{"messages":[{"content":"S","role":"system"},{"content":"first","role":"user"},{"content":"A","role":"assistant"},` +
		`{"content":[{"text":"the new question","type":"text"}],"name":"u1","role":"user"}],"model":"m","temperature":0.2,"top_p":0.9}`
	if b, _ := json.Marshal(got); string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	// Its parameter set is the app's.
	app, _ := ParamSetOf([]byte(`{"model":"m","temperature":0.2,"top_p":0.9,"stream":true,"messages":[{"role":"system","content":"S"},{"role":"user","content":"first"},{"role":"assistant","content":"A"},{"role":"user","content":"other"}]}`))
	warmed, _ := ParamSetOf(items[0].Request)
	if app.Key() != warmed.Key() || app.Prior != 2 || app.System == "" {
		t.Fatalf("app %+v, warmed %+v", app, warmed)
	}
}

// A line of frontdoor cache export is a request too.
func TestParseLikeReadsAnExportLine(t *testing.T) {
	like, err := ParseLike([]byte(`{"tenant":"acme","hits":3,"entry":"e1","request":{"model":"m","messages":[{"role":"user","content":"q"}]}}` + "\n" + `{"ignored":true}`))
	if err != nil || like.Model() != "m" {
		t.Fatalf("%v %+v", err, like)
	}
}
