package router

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"frontdoor/internal/testenv"
)

// createResponse posts a Responses request that a node answers (no-store:
// not from the cache) and returns its id and the node.
func createResponse(t *testing.T, gw *testGateway, input string, headers ...string) (id, node string) {
	t.Helper()
	resp, m := postResponses(t, gw, respBody(input, `"max_output_tokens":8`), append(headers, "Cache-Control", "no-store")...)
	id, _ = m["id"].(string)
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("create: %d %v", resp.StatusCode, m)
	}
	return id, resp.Header.Get("X-Upstream")
}

// followUp posts a follow-up of prev, streamed or not, and returns the
// status, the X-Upstream header and the body.
func followUp(t *testing.T, gw *testGateway, prev string, stream bool, headers ...string) (int, string, []byte) {
	t.Helper()
	extra := `"previous_response_id":` + string(mustJSON(prev))
	if stream {
		extra += `,"stream":true`
	}
	resp, b := post(t, gw.URL+"/v1/responses", respBody("repeat everything said before, word for word", extra), headers...)
	return resp.StatusCode, resp.Header.Get("X-Upstream"), b
}

// notFoundShape is a 404's error with the id taken out, to compare the
// answers to two ids.
func notFoundShape(t *testing.T, body []byte, id string) string {
	t.Helper()
	var m struct{ Error map[string]any }
	if err := json.Unmarshal(body, &m); err != nil || m.Error == nil {
		t.Fatalf("not an error envelope: %s", body)
	}
	return strings.ReplaceAll(string(mustJSON(m.Error)), id, "ID")
}

// TestResponsesStateStaysWithTenant: a request naming server-side state
// (previous_response_id, a conversation, a stored prompt, an
// item_reference) reaches a node only when that state is one frontdoor
// passed on for the same tenant. Another tenant's id and an unknown id
// get the same 404, streamed or not, and no node sees the request;
// forward_unknown_ids lets unknown ids through, never another tenant's.
func TestResponsesStateStaysWithTenant(t *testing.T) {
	node := testenv.GPUSim(t, nil)
	cfg := testConfig(node)
	cfg.Cache.Backend = "memory"
	t.Setenv("TEST_ALICE_KEYS", "sk-alice")
	t.Setenv("TEST_BOB_KEYS", "sk-bob")
	cfg.Tenants = []Tenant{{Name: "alice", APIKeysEnv: "TEST_ALICE_KEYS"}, {Name: "bob", APIKeysEnv: "TEST_BOB_KEYS"}}
	gw := startGateway(t, cfg)
	alice, bob := []string{"Authorization", "Bearer sk-alice"}, []string{"Authorization", "Bearer sk-bob"}

	secret, _ := createResponse(t, gw, "alice secret: my salary is 123456", alice...)
	// A response the cache served alice: its conversation is kept too.
	ask := func() (*http.Response, map[string]any) {
		return postResponses(t, gw, respBody("alice's cached question", ""), alice...)
	}
	ask()
	var cachedID string
	testenv.Eventually(t, 5*time.Second, func() bool {
		r, m := ask()
		cachedID, _ = m["id"].(string)
		return r.Header.Get("X-Cache") == "hit-exact"
	}, "no hit for alice's cached question")

	node.ResetRecorded()
	for _, stream := range []bool{false, true} {
		for who, h := range map[string][]string{"bob": bob, "anonymous": nil} {
			for _, id := range []string{secret, cachedID} {
				status, upstream, b := followUp(t, gw, id, stream, h...)
				if status != 404 || upstream != "" {
					t.Errorf("%s's follow-up of alice's %s (stream %v): %d from %q: %s", who, id, stream, status, upstream, b)
					continue
				}
				// The same 404 as an id nobody created.
				_, _, unknown := followUp(t, gw, "resp_nobodys", stream, h...)
				if got, want := notFoundShape(t, b, id), notFoundShape(t, unknown, "resp_nobodys"); got != want {
					t.Errorf("another tenant's id answers %s, an unknown one %s", got, want)
				}
				if strings.Contains(string(b), "123456") || strings.Contains(string(b), "alice") {
					t.Errorf("the 404 tells of alice: %s", b)
				}
			}
		}
	}
	// Other state frontdoor keeps no record of: a conversation, a stored
	// prompt template, an item of a stored response.
	for field, extra := range map[string]string{
		"conversation": `"conversation":"conv_alice"`,
		"prompt":       `"prompt":{"id":"pmpt_alice","version":"2"}`,
		"input[0].id":  `"x":0`, // see below
	} {
		body := respBody("go on", extra)
		if field == "input[0].id" {
			body = `{"model":"qwen3-8b","input":[{"type":"item_reference","id":"msg_alice"},{"role":"user","content":"go on"}]}`
		}
		resp, b := post(t, gw.URL+"/v1/responses", body, bob...)
		if resp.StatusCode != 404 || !strings.Contains(string(b), `"param":"`+field+`"`) {
			t.Errorf("%s: %d %s", field, resp.StatusCode, b)
		}
	}
	if got := node.Requests(); len(got) != 0 {
		t.Fatalf("the node saw %d refused requests: %s", len(got), firstBody(got))
	}

	// alice's own follow-ups go on: to the node that holds the first, and
	// as a conversation of its own for the one the cache served.
	for _, id := range []string{secret, cachedID} {
		for _, stream := range []bool{false, true} {
			if status, _, b := followUp(t, gw, id, stream, alice...); status != 200 {
				t.Errorf("alice's follow-up of %s (stream %v): %d %s", id, stream, status, b)
			}
		}
	}
	text := metricsText(t, gw)
	for series, want := range map[string]float64{
		`frontdoor_responses_refused_total{field="previous_response_id",reason="other_tenant"}`: 8,
		`frontdoor_responses_refused_total{field="previous_response_id",reason="unknown"}`:      8,
		`frontdoor_responses_refused_total{field="conversation",reason="unknown"}`:              1,
		`frontdoor_responses_refused_total{field="prompt",reason="unknown"}`:                    1,
		`frontdoor_responses_refused_total{field="item_reference",reason="unknown"}`:            1,
	} {
		if v := metricValue(t, text, series); v != want {
			t.Errorf("%s = %v, want %v", series, v, want)
		}
	}

	// forward_unknown_ids: an id frontdoor does not know goes to a node
	// (which answers for itself), another tenant's never does.
	cfg.Responses.ForwardUnknownIDs = true
	fwd := startGateway(t, cfg)
	own, _ := createResponse(t, fwd, "alice secret on the forwarding gateway", alice...)
	node.ResetRecorded()
	if status, upstream, b := followUp(t, fwd, own, false, bob...); status != 404 || upstream != "" {
		t.Errorf("forward_unknown_ids: bob's follow-up of alice's id: %d from %q: %s", status, upstream, b)
	}
	if got := node.Requests(); len(got) != 0 {
		t.Fatalf("forward_unknown_ids: the node saw another tenant's id: %s", firstBody(got))
	}
	if status, upstream, _ := followUp(t, fwd, "resp_nobodys", false, bob...); status != 404 || upstream == "" {
		t.Errorf("forward_unknown_ids: an unknown id: %d from %q, want the node's 404", status, upstream)
	}
	if resp, b := post(t, fwd.URL+"/v1/responses", respBody("go on", `"conversation":"conv_1"`), bob...); resp.Header.Get("X-Upstream") == "" {
		t.Errorf("forward_unknown_ids: a conversation did not reach a node: %d %s", resp.StatusCode, b)
	}
}

// TestResponsesStateAcrossReplicas: on a shared Redis, alice's follow-ups
// work from a second replica, both of a response a node holds and of one
// the cache served; bob's naming them get 404 there too, and no node sees
// them.
func TestResponsesStateAcrossReplicas(t *testing.T) {
	node := testenv.GPUSim(t, nil)
	cfg := testConfig(node)
	r := testenv.StartRedis(t)
	cfg.Cache.Backend, cfg.Cache.VectorSearch, cfg.Redis.URL = "redis", "local", r.URL()
	t.Setenv("TEST_ALICE_KEYS", "sk-alice")
	t.Setenv("TEST_BOB_KEYS", "sk-bob")
	cfg.Tenants = []Tenant{{Name: "alice", APIKeysEnv: "TEST_ALICE_KEYS"}, {Name: "bob", APIKeysEnv: "TEST_BOB_KEYS"}}
	one, two := startGateway(t, cfg), startGateway(t, cfg)
	alice, bob := []string{"Authorization", "Bearer sk-alice"}, []string{"Authorization", "Bearer sk-bob"}

	held, _ := createResponse(t, one, "alice secret: my salary is 123456", alice...)
	const question = "alice's question answered from the cache"
	postResponses(t, one, respBody(question, ""), alice...)
	var served map[string]any
	testenv.Eventually(t, 10*time.Second, func() bool {
		resp, m := postResponses(t, one, respBody(question, ""), alice...)
		served = m
		return resp.Header.Get("X-Cache") == "hit-exact"
	}, "no hit on the first replica")
	cachedID := served["id"].(string)

	node.ResetRecorded()
	for _, id := range []string{held, cachedID} {
		for _, stream := range []bool{false, true} {
			if status, upstream, b := followUp(t, two, id, stream, bob...); status != 404 || upstream != "" {
				t.Errorf("bob on the second replica, follow-up of %s (stream %v): %d from %q: %s", id, stream, status, upstream, b)
			}
		}
	}
	if got := node.Requests(); len(got) != 0 {
		t.Fatalf("the node saw bob's follow-ups: %s", firstBody(got))
	}
	if status, upstream, b := followUp(t, two, held, false, alice...); status != 200 || upstream != "gpu-a" {
		t.Errorf("alice's follow-up on the second replica: %d from %q: %s", status, upstream, b)
	}
	// The one the cache served: the second replica sends the conversation
	// it read from Redis.
	node.ResetRecorded()
	if status, _, b := followUp(t, two, cachedID, true, alice...); status != 200 {
		t.Fatalf("alice's follow-up of a cached response on the second replica: %d %s", status, b)
	}
	sent := node.Requests()
	if len(sent) != 1 || !strings.Contains(string(sent[0].Body), question) || strings.Contains(string(sent[0].Body), "previous_response_id") {
		t.Errorf("the follow-up reached the node as %d requests: %s", len(sent), firstBody(sent))
	}
	if resp, got := byID(t, "GET", two.URL+"/v1/responses/"+cachedID, "sk-alice"); resp.StatusCode != 200 || got["id"] != cachedID {
		t.Errorf("GET of a cached response on the second replica: %d %v", resp.StatusCode, got)
	}
	if resp, _ := byID(t, "GET", two.URL+"/v1/responses/"+cachedID, "sk-bob"); resp.StatusCode != 404 {
		t.Errorf("bob's GET of alice's cached response on the second replica: %d", resp.StatusCode)
	}
}
