package router

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"frontdoor/internal/warm"
	"frontdoor/router/admin"
)

func adminDo(t *testing.T, method, url, body string, headers ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1] // Go's client sends req.Host, not a Host header
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.Bytes()
}

// TestCacheOnlyNeverGoesUpstream: X-Cache-Only answers 204 on a miss without
// calling a node, and from the cache once the answer is there; "exact"
// takes exact hits only.
func TestCacheOnlyNeverGoesUpstream(t *testing.T) {
	gw, s := cacheGateway(t, "memory", nil)
	body := cbody("How many moons does Mars have?", "")
	resp, b := post(t, gw.URL+"/v1/chat/completions", body, "X-Cache-Only", "1")
	if resp.StatusCode != 204 || len(b) != 0 || s.Stats().Received != 0 {
		t.Fatalf("lookup-only miss: %d %q, node saw %d", resp.StatusCode, b, s.Stats().Received)
	}
	askStored(t, gw, body)
	if xc, _, b := ask(t, gw, body, "X-Cache-Only", "1"); xc != "hit-exact" || chatContent(t, b) == "" {
		t.Fatalf("lookup-only after store: %q", xc)
	}
	similar := cbody("how many moons does mars have", "")
	if xc, _, _ := ask(t, gw, similar, "X-Cache-Only", "1"); xc != "hit-semantic" {
		t.Fatalf("lookup-only similar: %q", xc)
	}
	if resp, _ := post(t, gw.URL+"/v1/chat/completions", similar, "X-Cache-Only", "exact"); resp.StatusCode != 204 {
		t.Fatalf("exact-only lookup of a similar request: %d, want 204", resp.StatusCode)
	}
	// Not cacheable (n > 1) is a 204 too, never a call.
	if resp, _ := post(t, gw.URL+"/v1/chat/completions", chatBody("hot", `"n":2`), "X-Cache-Only", "1"); resp.StatusCode != 204 {
		t.Fatalf("uncacheable lookup-only: %d", resp.StatusCode)
	}
	if got := s.Stats().Received; got != 1 {
		t.Fatalf("node saw %d requests, want 1 (the store)", got)
	}
}

// TestTagPurgeRemovesExactlyTagged: entries stored with X-Cache-Tag go with
// DELETE /admin/cache?tag=, and nothing else does, on memory and Redis.
func TestTagPurgeRemovesExactlyTagged(t *testing.T) {
	for _, backend := range []string{"memory", "redis", "redisearch"} {
		t.Run(backend, func(t *testing.T) {
			gw, _ := cacheGateway(t, backend, nil)
			tagged := []string{"What is the refund window?", "退货政策是什么？"}
			others := map[string]string{"How do I reset my password?": "", "Where is the office?": "faq-v2"}
			for _, q := range tagged {
				askStored(t, gw, cbody(q, ""), "X-Cache-Tag", "faq-v1")
			}
			askStored(t, gw, cbody(tagged[0], ""), "X-Cache-Tag", "faq-v1", "Authorization", "Bearer sk-acme-1")
			for q, tag := range others {
				askStored(t, gw, cbody(q, ""), "X-Cache-Tag", tag)
			}
			code, b := adminDo(t, http.MethodDelete, gw.URL+"/admin/cache?tag=faq-v1", "")
			var res struct{ Deleted int }
			if code != 200 || json.Unmarshal(b, &res) != nil || res.Deleted != 3 {
				t.Fatalf("purge: %d %s; want 3 deleted (2 default, 1 acme)", code, b)
			}
			for _, q := range tagged {
				if resp, _ := post(t, gw.URL+"/v1/chat/completions", cbody(q, ""), "X-Cache-Only", "1"); resp.StatusCode != 204 {
					t.Fatalf("%q still cached after its tag was purged (%s)", q, resp.Header.Get("X-Cache"))
				}
			}
			for q := range others {
				if xc, _, _ := ask(t, gw, cbody(q, ""), "X-Cache-Only", "1"); xc != "hit-exact" {
					t.Fatalf("%q lost by another tag's purge: %q", q, xc)
				}
			}
			if code, _ := adminDo(t, http.MethodDelete, gw.URL+"/admin/cache", ""); code != 400 {
				t.Fatalf("purge with neither namespace nor tag: %d", code)
			}
		})
	}
}

// TestImportAnswerNoUpstream: POST /admin/cache/entries stores a curated
// answer; the same and a similar question are hits, and no node is called.
func TestImportAnswerNoUpstream(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		gw, s := cacheGateway(t, backend, nil)
		body := cbody("How long is the warranty?", "")
		imp, _ := json.Marshal(map[string]any{"tenant": "acme", "tag": "faq", "request": json.RawMessage(body), "answer": "Two years."})
		code, b := adminDo(t, http.MethodPost, gw.URL+"/admin/cache/entries", string(imp))
		if code != 200 || !strings.Contains(string(b), `"result":"imported"`) {
			t.Fatalf("import: %d %s", code, b)
		}
		if code, b := adminDo(t, http.MethodPost, gw.URL+"/admin/cache/entries", string(imp)); code != 200 || !strings.Contains(string(b), `"result":"cached"`) {
			t.Fatalf("second import: %d %s", code, b)
		}
		xc, _, b := ask(t, gw, body, "Authorization", "Bearer sk-acme-1")
		if xc != "hit-exact" || chatContent(t, b) != "Two years." {
			t.Fatalf("after import: %q %s", xc, b)
		}
		if xc, _, _ := ask(t, gw, cbody("how long is the warranty", ""), "Authorization", "Bearer sk-acme-1"); xc != "hit-semantic" {
			t.Fatalf("similar after import: %q", xc)
		}
		if resp, _ := post(t, gw.URL+"/v1/chat/completions", body, "X-Cache-Only", "1"); resp.StatusCode != 204 {
			t.Fatalf("another tenant sees the import: %d %s", resp.StatusCode, resp.Header.Get("X-Cache"))
		}
		if n := s.Stats().Received; n != 0 {
			t.Fatalf("the node saw %d requests; an import makes none", n)
		}
		bad, _ := json.Marshal(map[string]any{"tenant": "nobody", "request": json.RawMessage(body), "answer": "x"})
		if code, _ := adminDo(t, http.MethodPost, gw.URL+"/admin/cache/entries", string(bad)); code != 400 {
			t.Fatalf("import for an unknown tenant: %d", code)
		}
	})
}

// TestAdminWarmJob: POST /admin/cache/warm runs a file in the background;
// GET /admin/cache/warm/{id} and /status show its progress; malformed lines
// are reported by line.
func TestAdminWarmJob(t *testing.T) {
	gw, s := cacheGateway(t, "memory", nil)
	file := "# faq\n" + cbody("What are the opening hours?", "") + "\n" +
		`{"prompt":"Do you ship abroad?","answer":"Yes, to 40 countries.","model":"qwen3-8b"}` + "\n" +
		"{not json\n" +
		`{"tenant":"acme","request":` + cbody("Is there a student discount?", "") + "}\n"
	code, b := adminDo(t, http.MethodPost, gw.URL+"/admin/cache/warm?name=faq.jsonl", file)
	var started struct {
		ID    string
		Total int
		Tag   string
	}
	if code != 202 || json.Unmarshal(b, &started) != nil || started.Total != 4 || started.Tag != "faq.jsonl" {
		t.Fatalf("start: %d %s", code, b)
	}
	var st warm.JobStatus
	deadline := time.Now().Add(10 * time.Second)
	for st.State != "done" {
		if time.Now().After(deadline) {
			t.Fatalf("job not done: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
		code, b := adminDo(t, http.MethodGet, gw.URL+"/admin/cache/warm/"+started.ID, "")
		if code != 200 || json.Unmarshal(b, &st) != nil {
			t.Fatalf("status: %d %s", code, b)
		}
	}
	if st.Done != 4 || st.Warmed != 3 || st.Failed != 1 || len(st.Failures) != 1 || st.Failures[0].File != "faq.jsonl" || st.Failures[0].Line != 4 {
		t.Fatalf("job = %+v", st)
	}
	if n := s.Stats().Received; n != 2 {
		t.Fatalf("node saw %d requests, want 2 (the pair is imported)", n)
	}
	resp, _ := eventuallyHit(t, gw, cbody("What are the opening hours?", ""), "hit-exact")
	eventuallyHit(t, gw, cbody("Is there a student discount?", ""), "hit-exact", "Authorization", "Bearer sk-acme-1")
	// What a warm-up stores is curated (approved near-misses may point at
	// it, cache.semantic.verify); what a client stores, tagged or not, is not.
	if code, b := adminDo(t, http.MethodGet, gw.URL+"/admin/cache/entries/"+resp.Header.Get("X-Cache-Entry"), ""); code != 200 || !strings.Contains(string(b), `"curated":true`) {
		t.Fatalf("a warmed entry is not curated: %d %s", code, b)
	}
	askStored(t, gw, cbody("Where is the office?", ""), "X-Cache-Tag", "faq.jsonl")
	resp, _ = eventuallyHit(t, gw, cbody("Where is the office?", ""), "hit-exact")
	if code, b := adminDo(t, http.MethodGet, gw.URL+"/admin/cache/entries/"+resp.Header.Get("X-Cache-Entry"), ""); code != 200 || strings.Contains(string(b), `"curated"`) {
		t.Fatalf("a client's tagged entry is curated: %d %s", code, b)
	}
	_, b = adminDo(t, http.MethodGet, gw.URL+"/status", "")
	if !strings.Contains(string(b), `"id":"`+started.ID+`"`) || !strings.Contains(string(b), `"state":"done"`) {
		t.Fatalf("/status lacks the job: %s", b)
	}
	// Tagged with the file name.
	if code, b := adminDo(t, http.MethodDelete, gw.URL+"/admin/cache?tag=faq.jsonl", ""); code != 200 || !strings.Contains(string(b), `"deleted":4`) {
		t.Fatalf("purge by the job's tag: %d %s", code, b)
	}
	if code, _ := adminDo(t, http.MethodGet, gw.URL+"/admin/cache/warm/warm-nope", ""); code != 404 {
		t.Fatalf("unknown job: %d", code)
	}
	if code, b := adminDo(t, http.MethodPost, gw.URL+"/admin/cache/warm?name=p.txt", "a plain prompt\n"); code != 400 || !strings.Contains(string(b), "need a model") {
		t.Fatalf("plain text without a model: %d %s", code, b)
	}
	// Admin only.
	gw2, _ := cacheGateway(t, "memory", func(c *Config) { c.Admin.AllowCIDRs = nil })
	if code, _ := adminDo(t, http.MethodPost, gw2.URL+"/admin/cache/warm", file); code != 403 {
		t.Fatalf("warm without admin rights: %d", code)
	}
	if code, _ := adminDo(t, http.MethodGet, gw2.URL+"/admin/cache/hot", ""); code != 403 {
		t.Fatalf("hot without admin rights: %d", code)
	}
}

// TestHotExport: GET /admin/cache/hot lists the most-hit entries first, as
// warmable chat-request lines without the stream fields; warm-up lookups
// don't count.
func TestHotExport(t *testing.T) {
	gw, _ := cacheGateway(t, "memory", func(c *Config) { c.Admin.ShowCachedQuestions = true })
	qs := []string{"Alpha question?", "Beta question?", "Gamma question?"}
	for _, q := range qs {
		askStored(t, gw, cbody(q, ""))
	}
	for i, q := range qs { // 1, 3 and 2 hits
		for range []int{1, 3, 2}[i] {
			ask(t, gw, cbody(q, `"stream":false`))
		}
	}
	for range 5 {
		ask(t, gw, cbody(qs[0], ""), "X-Cache-Only", "1")
	}
	code, b := adminDo(t, http.MethodGet, gw.URL+"/admin/cache/hot?top=2", "")
	if code != 200 {
		t.Fatalf("hot: %d %s", code, b)
	}
	var got []admin.HotEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var e admin.HotEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		got = append(got, e)
	}
	if len(got) != 2 || got[0].Hits != 3 || got[1].Hits != 2 {
		t.Fatalf("hot = %+v", got)
	}
	if !strings.Contains(string(got[0].Request), "Beta question?") || strings.Contains(string(got[0].Request), "stream") {
		t.Fatalf("top request = %s", got[0].Request)
	}
	if got[0].Tenant != "default" {
		t.Fatalf("tenant = %q, want default", got[0].Tenant)
	}
	// For one tenant: only its entries, without the tenant field.
	ask(t, gw, cbody(qs[2], ""), "Authorization", "Bearer sk-acme-1") // a miss: stored in acme's namespace
	eventuallyHit(t, gw, cbody(qs[2], ""), "hit-exact", "Authorization", "Bearer sk-acme-1")
	_, b = adminDo(t, http.MethodGet, gw.URL+"/admin/cache/hot?tenant=acme", "")
	if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); len(lines) != 1 || strings.Contains(lines[0], `"tenant"`) || !strings.Contains(lines[0], "Gamma question?") {
		t.Fatalf("acme's export: %s", b)
	}
}
