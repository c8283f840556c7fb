package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"frontdoor/balancer"
	"frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
	"frontdoor/internal/units"
	"frontdoor/router"
)

const testAdminToken = "a8f8e432998d9af0701319da19bf179f744814bc9d3436fa0ac818363e7bdaa4"

// warmGateway serves a gateway in process (as frontdoor serve does) in front
// of one gpusim node, with the memory cache unless mutate says otherwise.
func warmGateway(t *testing.T, node *gpusim.Server, mutate func(*router.Config)) string {
	t.Helper()
	t.Setenv("FRONTDOOR_ADMIN_TOKEN", testAdminToken)
	t.Setenv("WARM_ACME_KEYS", "sk-acme")
	cfg := router.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Logging.AccessLog = false
	cfg.Balancer.HealthInterval = 3600e9
	// A lookup slower than reads.timeout (100ms) is a miss by design; under
	// -race on a loaded machine an embedding and search can take that
	// long, and a rewording that missed is stored and then an exact hit.
	cfg.Cache.Reads.Timeout = units.Duration(10 * time.Second)
	cfg.Nodes = []balancer.NodeConfig{{Name: "gpu-a", URL: node.URL(), Kind: "vllm", Models: []string{"qwen3-8b"}, MaxConcurrency: 64, Weight: 1}}
	cfg.Tenants = []router.Tenant{{Name: "acme", APIKeysEnv: "WARM_ACME_KEYS"}}
	if mutate != nil {
		mutate(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, "", &lockedBuffer{}, func(a, _ string) { addr <- a }) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case a := <-addr:
		return "http://" + a
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	return ""
}

func simNode(t *testing.T, ttft time.Duration) *gpusim.Server {
	return testenv.GPUSim(t, func(c *gpusim.Config) { c.TTFT, c.OutputTokens, c.MaxNumSeqs = ttft, 4, 64 })
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// warmRun runs frontdoor warm and returns its exit code, stdout and stderr.
func warmRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := runWarm(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func userBody(prompt string) string {
	b, _ := json.Marshal(map[string]any{"model": "qwen3-8b", "messages": []map[string]string{{"role": "user", "content": prompt}}})
	return string(b)
}

// xcache posts a chat request and returns its X-Cache.
func xcache(t *testing.T, base, body string, headers ...string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 && (resp.StatusCode != 204 || req.Header.Get("X-Cache-Only") == "") {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return resp.Header.Get("X-Cache")
}

// lookupOnly makes a request a lookup that never goes upstream, so that
// waiting for a semantic hit does not store the reworded question itself
// (whose exact hit would then answer the next try): a warmed answer can be
// served from its finished flight, as an exact hit, before the write-back
// has stored it, its vector included.
var lookupOnly = []string{"X-Cache-Only", "1"}

func eventuallyX(t *testing.T, base, body, want string, headers ...string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		got := xcache(t, base, body, headers...)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("X-Cache %q, want %q for %s", got, want, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Plain text, English and Chinese: after warming, the prompts are exact
// hits and rewordings semantic ones; a re-run costs no upstream call.
func TestWarmPlainText(t *testing.T) {
	node := simNode(t, 0)
	base := warmGateway(t, node, nil)
	file := writeFile(t, "hot-prompts.txt", "# hot prompts\nWhat is your refund policy?\n\n如何重置我的密码？\nHow do I contact support?\n")
	code, out, errOut := warmRun(t, file, "--target", base, "--model", "qwen3-8b")
	if code != 0 || strings.TrimSpace(out) != "warmed 3, already cached 0, failed 0" {
		t.Fatalf("exit %d, stdout %q, stderr %s", code, out, errOut)
	}
	if !strings.Contains(errOut, "warm: done: warmed 3, already cached 0, failed 0") {
		t.Fatalf("no plain summary line off a terminal: %s", errOut)
	}
	received := node.Stats().Received
	if received != 3 {
		t.Fatalf("node saw %d requests, want 3", received)
	}
	eventuallyX(t, base, userBody("What is your refund policy?"), "hit-exact")
	eventuallyX(t, base, userBody("如何重置我的密码？"), "hit-exact")
	eventuallyX(t, base, userBody("what is your refund policy"), "hit-semantic", lookupOnly...)
	code, out, _ = warmRun(t, file, "--target", base, "--model", "qwen3-8b")
	if code != 0 || strings.TrimSpace(out) != "warmed 0, already cached 3, failed 0" {
		t.Fatalf("re-run: exit %d, %q", code, out)
	}
	if n := node.Stats().Received; n != received {
		t.Fatalf("a re-run on a warm cache made %d upstream calls", n-received)
	}
}

// Chat-request JSONL, with a line for a named tenant (the admin token acts
// for it), a malformed line reported by file and line, and the rest warmed.
func TestWarmChatJSONLAndMalformedLine(t *testing.T) {
	node := simNode(t, 0)
	base := warmGateway(t, node, nil)
	file := writeFile(t, "chat.jsonl", strings.Join([]string{
		userBody("Which plans do you offer?"),
		`{"tenant":"acme","request":` + userBody("Do you have an SLA?") + `}`,
		`{"model":"qwen3-8b","messages":[`,
		`{"model":"qwen3-8b","stream":true,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Is there a free trial?"}]}`,
	}, "\n"))
	report := filepath.Join(t.TempDir(), "failures.jsonl")
	code, out, errOut := warmRun(t, file, "--target", base, "--report", report, "--concurrency", "2")
	if code != 1 || strings.TrimSpace(out) != "warmed 3, already cached 0, failed 1" {
		t.Fatalf("exit %d, stdout %q, stderr %s", code, out, errOut)
	}
	if !strings.Contains(errOut, "chat.jsonl:3: ") {
		t.Fatalf("the malformed line is not named: %s", errOut)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		File string
		Line int
	}
	if err := json.Unmarshal(bytes.TrimSpace(b), &f); err != nil || f.File != file || f.Line != 3 {
		t.Fatalf("report %s: %+v %v", b, f, err)
	}
	eventuallyX(t, base, userBody("Which plans do you offer?"), "hit-exact")
	eventuallyX(t, base, userBody("Do you have an SLA?"), "hit-exact", "Authorization", "Bearer sk-acme")
	eventuallyX(t, base, `{"model":"qwen3-8b","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Is there a free trial?"}]}`, "hit-exact")
	// Without the admin token, a line that names a tenant fails alone.
	t.Setenv("FRONTDOOR_ADMIN_TOKEN", "")
	code, out, _ = warmRun(t, file, "--target", base)
	if code != 1 || strings.TrimSpace(out) != "warmed 0, already cached 2, failed 2" {
		t.Fatalf("without the admin token: exit %d, %q", code, out)
	}
}

const faqPairs = `{"prompt":"What is the warranty period?","answer":"Two years from delivery.","model":"qwen3-8b"}
{"messages":[{"role":"user","content":"发票怎么开？"}],"system":"你是客服。","answer":"在订单页面点击“申请发票”。","model":"qwen3-8b"}
{"prompt":"Can I change my delivery address?","answer":"Yes, until the order ships.","model":"qwen3-8b","params":{"temperature":0}}
`

// Answered pairs through a gateway: imported, hits, and no node call.
func TestWarmPairsThroughTarget(t *testing.T) {
	node := simNode(t, 0)
	base := warmGateway(t, node, nil)
	file := writeFile(t, "faq.jsonl", faqPairs)
	code, out, errOut := warmRun(t, file, "--target", base)
	if code != 0 || strings.TrimSpace(out) != "warmed 3, already cached 0, failed 0" {
		t.Fatalf("exit %d, stdout %q, stderr %s", code, out, errOut)
	}
	eventuallyX(t, base, userBody("What is the warranty period?"), "hit-exact")
	eventuallyX(t, base, userBody("what is the warranty period"), "hit-semantic", lookupOnly...)
	eventuallyX(t, base, `{"model":"qwen3-8b","messages":[{"role":"system","content":"你是客服。"},{"role":"user","content":"发票怎么开？"}]}`, "hit-exact")
	eventuallyX(t, base, `{"model":"qwen3-8b","temperature":0,"messages":[{"role":"user","content":"Can I change my delivery address?"}]}`, "hit-exact")
	if n := node.Stats().Received; n != 0 {
		t.Fatalf("imports made %d node calls, want 0", n)
	}
	if code, out, _ := warmRun(t, file, "--target", base); code != 0 || strings.TrimSpace(out) != "warmed 0, already cached 3, failed 0" {
		t.Fatalf("re-run: %d %q", code, out)
	}
	// Tagged with the file name: the purge takes exactly them.
	req, _ := http.NewRequest(http.MethodDelete, base+"/admin/cache?tag=faq.jsonl", nil)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var purged struct{ Deleted int }
	_ = json.NewDecoder(resp.Body).Decode(&purged)
	resp.Body.Close()
	if purged.Deleted != 3 {
		t.Fatalf("tag purge deleted %d, want 3", purged.Deleted)
	}
}

// --config imports answered pairs straight into the configured Redis; a
// gateway on that Redis then answers them, with no node call.
func TestWarmPairsIntoConfiguredRedis(t *testing.T) {
	r := testenv.StartRedis(t)
	node := simNode(t, 0)
	cfgFile := writeFile(t, "frontdoor.yaml", fmt.Sprintf(`
redis: {url: %q}
cache: {backend: redis, vector_search: local}
nodes:
  - {name: gpu-a, url: %s, models: [qwen3-8b]}
`, r.URL(), node.URL()))
	file := writeFile(t, "faq.jsonl", faqPairs+userBody("a chat request needs --target")+"\n")
	code, out, errOut := warmRun(t, file, "--config", cfgFile)
	if code != 1 || strings.TrimSpace(out) != "warmed 3, already cached 0, failed 1" || !strings.Contains(errOut, "faq.jsonl:4: ") {
		t.Fatalf("exit %d, stdout %q, stderr %s", code, out, errOut)
	}
	base := warmGateway(t, node, func(c *router.Config) {
		c.Redis.URL, c.Cache.Backend, c.Cache.VectorSearch = r.URL(), "redis", "local"
	})
	eventuallyX(t, base, userBody("What is the warranty period?"), "hit-exact")
	eventuallyX(t, base, userBody("what is the warranty period"), "hit-semantic", lookupOnly...)
	if n := node.Stats().Received; n != 0 {
		t.Fatalf("imports made %d node calls, want 0", n)
	}
}

func prompts(n int, prefix string) string {
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "%s question number %d about topic %c?\n", prefix, i, 'A'+rune(i%26))
	}
	return sb.String()
}

// --concurrency 5: the node never has more than 5 of the run's requests at
// once (and does reach 5).
func TestWarmConcurrencyHolds(t *testing.T) {
	node := simNode(t, 60*time.Millisecond)
	base := warmGateway(t, node, nil)
	file := writeFile(t, "many.txt", prompts(30, "Concurrency"))
	code, out, errOut := warmRun(t, file, "--target", base, "--model", "qwen3-8b", "--concurrency", "5")
	if code != 0 || strings.TrimSpace(out) != "warmed 30, already cached 0, failed 0" {
		t.Fatalf("exit %d, %q, %s", code, out, errOut)
	}
	st := node.Stats()
	if st.MaxRunning != 5 || st.Received != 30 {
		t.Fatalf("node: at most %d in flight (want exactly 5), %d received", st.MaxRunning, st.Received)
	}
}

// --rps 20: requests reach the node at 20 per second. The run is never
// faster than the rate (the whole span is at least 40 gaps of 50 ms, less
// 5%), and the median gap is 50 ms ± 5%: a busy machine can delay one
// request, which lengthens the span but not the pacing.
func TestWarmRateHolds(t *testing.T) {
	node := simNode(t, 0)
	base := warmGateway(t, node, nil)
	const n, rps = 41, 20.0
	file := writeFile(t, "paced.txt", prompts(n, "Rate"))
	code, out, errOut := warmRun(t, file, "--target", base, "--model", "qwen3-8b", "--rps", "20", "--concurrency", "5")
	if code != 0 || !strings.HasPrefix(out, fmt.Sprintf("warmed %d,", n)) {
		t.Fatalf("exit %d, %q, %s", code, out, errOut)
	}
	reqs := node.Requests()
	var at []time.Time
	for _, r := range reqs {
		if r.Path == "/v1/chat/completions" {
			at = append(at, r.At)
		}
	}
	if len(at) != n {
		t.Fatalf("node recorded %d requests, want %d", len(at), n)
	}
	slices.SortFunc(at, time.Time.Compare)
	gaps := make([]float64, 0, n-1)
	for i := 1; i < n; i++ {
		gaps = append(gaps, at[i].Sub(at[i-1]).Seconds())
	}
	slices.Sort(gaps)
	median, span := gaps[len(gaps)/2], at[n-1].Sub(at[0]).Seconds()
	t.Logf("at the node: median gap %.1f ms, overall %.2f/s (want %.0f/s)", median*1000, float64(n-1)/span, rps)
	if want := float64(n-1) / rps; span < want*0.95 {
		t.Fatalf("%d requests in %.2f s: faster than %.0f/s", n, span, rps)
	}
	if median < 0.95/rps || median > 1.05/rps {
		t.Fatalf("median gap %.1f ms, want %.0f ms ± 5%%", median*1000, 1000/rps)
	}
}

// Interrupted (Ctrl-C), a run stops starting items and says so; a re-run
// resumes: every prompt reaches the node exactly once in all.
func TestWarmInterruptResumes(t *testing.T) {
	node := simNode(t, 40*time.Millisecond)
	base := warmGateway(t, node, nil)
	const n = 40
	file := writeFile(t, "resume.txt", prompts(n, "Resume"))
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(1)
	var code int
	go func() {
		defer wg.Done()
		code = runWarm(ctx, []string{file, "--target", base, "--model", "qwen3-8b", "--concurrency", "2"}, &out, &errOut)
	}()
	testenv.Eventually(t, 5*time.Second, func() bool { return node.Stats().Completed >= 6 }, "no progress")
	cancel()
	wg.Wait()
	if code != 1 || !strings.Contains(out.String(), "interrupted") {
		t.Fatalf("interrupted run: exit %d, %q", code, out.String())
	}
	first := node.Stats().Received
	if first >= n {
		t.Fatalf("the interrupt did not stop the run (%d sent)", first)
	}
	time.Sleep(100 * time.Millisecond) // the last write-backs
	code2, out2, _ := warmRun(t, file, "--target", base, "--model", "qwen3-8b")
	want := fmt.Sprintf("warmed %d, already cached %d, failed 0", n-first, first)
	if code2 != 0 || strings.TrimSpace(out2) != want {
		t.Fatalf("resume: exit %d, %q, want %q", code2, out2, want)
	}
	if got := node.Stats().Received; got != n {
		t.Fatalf("node saw %d requests over both runs, want %d", got, n)
	}
}

// cache export writes the most-hit entries as chat-request JSONL; warming
// another gateway from it makes them hits there.
func TestCacheExportWarmsAnotherCluster(t *testing.T) {
	node := simNode(t, 0)
	base := warmGateway(t, node, func(c *router.Config) { c.Admin.ShowCachedQuestions = true })
	file := writeFile(t, "hot.txt", "Most asked?\nSecond most asked?\nRarely asked?\n")
	if code, out, errOut := warmRun(t, file, "--target", base, "--model", "qwen3-8b"); code != 0 {
		t.Fatalf("warm: %d %q %s", code, out, errOut)
	}
	for q, hits := range map[string]int{"Most asked?": 3, "Second most asked?": 2, "Rarely asked?": 1} {
		for range hits {
			eventuallyX(t, base, userBody(q), "hit-exact")
		}
	}
	outFile := filepath.Join(t.TempDir(), "hot.jsonl")
	// The export holds prompts: readable by its owner only, even over a
	// file that was 0644.
	if err := os.WriteFile(outFile, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	var so, se bytes.Buffer
	if code := run([]string{"cache", "export", "--top", "2", "--out", outFile, "--target", base}, &so, &se); code != 0 {
		t.Fatalf("export: %d %s", code, se.String())
	}
	if fi, err := os.Stat(outFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("export file mode: %v %v, want 0600", fi.Mode(), err)
	}
	b, _ := os.ReadFile(outFile)
	sc := bufio.NewScanner(bytes.NewReader(b))
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) != 2 || !strings.Contains(lines[0], "Most asked?") || !strings.Contains(lines[1], "Second most asked?") {
		t.Fatalf("export:\n%s", b)
	}
	node2 := simNode(t, 0)
	base2 := warmGateway(t, node2, nil)
	if code, out, errOut := warmRun(t, outFile, "--target", base2); code != 0 || strings.TrimSpace(out) != "warmed 2, already cached 0, failed 0" {
		t.Fatalf("warm from the export: %d %q %s", code, out, errOut)
	}
	eventuallyX(t, base2, userBody("Most asked?"), "hit-exact")
	// One tenant's export warms with that tenant's key: no admin token.
	so.Reset()
	if code := run([]string{"cache", "export", "--tenant", "default", "--top", "1", "--target", base}, &so, &se); code != 0 || strings.Contains(so.String(), `"tenant"`) {
		t.Fatalf("export --tenant: %d %s", code, so.String())
	}
	node3 := simNode(t, 0)
	base3 := warmGateway(t, node3, nil)
	t.Setenv("FRONTDOOR_ADMIN_TOKEN", "") // a line naming a tenant would fail
	one := writeFile(t, "default.jsonl", so.String())
	if code, out, errOut := warmRun(t, one, "--target", base3); code != 0 || strings.TrimSpace(out) != "warmed 1, already cached 0, failed 0" {
		t.Fatalf("warm from one tenant's export: %d %q %s", code, out, errOut)
	}
}

// The examples shipped in deploy/examples warm the demo-shaped gateway.
func TestWarmShippedExamples(t *testing.T) {
	node := simNode(t, 0)
	base := warmGateway(t, node, nil)
	code, out, errOut := warmRun(t, "../../deploy/examples/hot-prompts.txt", "../../deploy/examples/faq.jsonl", "--target", base, "--model", "qwen3-8b")
	if code != 0 || !strings.HasSuffix(strings.TrimSpace(out), "failed 0") {
		t.Fatalf("exit %d, %q, %s", code, out, errOut)
	}
}

// --dry-run looks up only: it counts what would be warmed and sends nothing.
func TestWarmDryRun(t *testing.T) {
	node := simNode(t, 0)
	base := warmGateway(t, node, nil)
	some := writeFile(t, "some.txt", "First?\nSecond?\n")
	all := writeFile(t, "all.txt", "First?\nSecond?\nThird?\n")
	if code, out, _ := warmRun(t, some, "--target", base, "--model", "qwen3-8b"); code != 0 {
		t.Fatalf("warm: %d %q", code, out)
	}
	before := node.Stats().Received
	code, out, _ := warmRun(t, all, "--target", base, "--model", "qwen3-8b", "--dry-run")
	if code != 0 || strings.TrimSpace(out) != "warmed 0, already cached 2, failed 0, would warm 1" {
		t.Fatalf("dry run: %d %q", code, out)
	}
	if n := node.Stats().Received; n != before {
		t.Fatalf("a dry run made %d node calls", n-before)
	}
}

// Without admin.show_cached_questions (or logging.log_prompts) the hot list
// is refused, so cache export writes nothing and names the switch.
func TestCacheExportFollowsPrivacy(t *testing.T) {
	node := simNode(t, 0)
	base := warmGateway(t, node, nil)
	eventuallyX(t, base, userBody("A private question?"), "hit-exact")
	outFile := filepath.Join(t.TempDir(), "hot.jsonl")
	var so, se bytes.Buffer
	code := run([]string{"cache", "export", "--out", outFile, "--target", base}, &so, &se)
	if code != 1 || !strings.Contains(se.String(), "admin.show_cached_questions") {
		t.Fatalf("export with questions hidden: exit %d, stderr %q", code, se.String())
	}
	if _, err := os.Stat(outFile); !os.IsNotExist(err) {
		t.Fatalf("export wrote %s (%v)", outFile, err)
	}
}

// appBody is a chat request as an app sends it: a system prompt and its
// own sampling fields around the user's question.
func appBody(question string) string {
	b, _ := json.Marshal(map[string]any{"model": "qwen3-8b", "temperature": 0.3, "max_tokens": 64, "stream": false,
		"messages": []map[string]string{{"role": "system", "content": "You are Acme's support assistant. Answer briefly."},
			{"role": "user", "content": question}}})
	return string(b)
}

// A plain-text warm misses the app's requests, whose system prompt and
// parameters differ, and says so from the gateway's own count of what its
// clients send; warmed --like one of the app's requests, the same
// questions are then hits, exact and semantic.
func TestWarmLikeTheApp(t *testing.T) {
	node := simNode(t, 0)
	base := warmGateway(t, node, nil)
	for i := range 9 { // one in 8 is sampled: two of these
		if got := xcache(t, base, appBody(fmt.Sprintf("An earlier question number %d?", i))); got != "miss" {
			t.Fatalf("X-Cache %q", got)
		}
	}
	plain := writeFile(t, "plain.txt", "How do I reset my password?\n")
	code, _, errOut := warmRun(t, plain, "--target", base, "--model", "qwen3-8b")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"the gateway's clients send these parameter sets most (of 2 chat requests sampled):",
		`100%  {"max_tokens":64,"model":"qwen3-8b","temperature":0.3}, a system prompt (sha256 `,
		`the plain-text prompts are sent with {"model":"qwen3-8b"}, no system prompt, which none of those requests use;`,
		"pass --like FILE",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("no %q in:\n%s", want, errOut)
		}
	}
	if got := xcache(t, base, appBody("How do I reset my password?"), lookupOnly...); got != "miss" {
		t.Fatalf("the app's request after a plain warm: X-Cache %q, want miss (the problem --like solves)", got)
	}

	var pretty bytes.Buffer
	_ = json.Indent(&pretty, []byte(appBody("A question the app asked once")), "", "  ")
	like := writeFile(t, "like.json", pretty.String())
	questions := writeFile(t, "questions.txt", "How do I reset my password?\nWhere is my invoice?\n")
	received := node.Stats().Received
	code, out, errOut := warmRun(t, questions, "--target", base, "--like", like)
	if code != 0 || strings.TrimSpace(out) != "warmed 2, already cached 0, failed 0" {
		t.Fatalf("--like: exit %d, %q, %s", code, out, errOut)
	}
	if strings.Contains(errOut, "parameter sets") {
		t.Errorf("a --like warm was advised to use --like:\n%s", errOut)
	}
	if n := node.Stats().Received - received; n != 2 {
		t.Fatalf("the node saw %d warm requests, want 2", n)
	}
	eventuallyX(t, base, appBody("How do I reset my password?"), "hit-exact")
	eventuallyX(t, base, appBody("Where is my invoice?"), "hit-exact")
	eventuallyX(t, base, appBody("where is my invoice"), "hit-semantic", lookupOnly...)

	if code, _, errOut := warmRun(t, questions, "--target", base, "--like", like, "--temperature", "0"); code != 2 ||
		!strings.Contains(errOut, "--like takes the system prompt and the parameters from its request") {
		t.Errorf("--like with --temperature: exit %d, %s", code, errOut)
	}
	bad := writeFile(t, "bad.json", `{"model":"qwen3-8b","messages":[{"role":"system","content":"no question"}]}`)
	if code, _, errOut := warmRun(t, questions, "--target", base, "--like", bad); code != 2 || !strings.Contains(errOut, "no user message") {
		t.Errorf("--like without a user message: exit %d, %s", code, errOut)
	}
}
