package router

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sim "frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
	"frontdoor/router/admin"
)

func TestAuthTenantsAndKeysStayOutOfLogs(t *testing.T) {
	s := testenv.GPUSim(t, nil)
	cfg := testConfig(s)
	cfg.Auth.Required = true
	t.Setenv("TEST_ACME_KEYS", "sk-acme-very-secret")
	cfg.Tenants = []Tenant{{Name: "acme", APIKeysEnv: "TEST_ACME_KEYS", Models: []string{"qwen3-8b"}},
		{Name: "hashed", APIKeySHA256: []string{"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}}} // sha256("test")
	cfg.Nodes[0].Models = []string{"qwen3-8b", "qwen3-8b-v2"}
	gw := startGateway(t, cfg)
	if resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody("hi", "")); resp.StatusCode != 401 || !strings.Contains(string(b), "missing_api_key") {
		t.Fatalf("no key: %d %s", resp.StatusCode, b)
	}
	if resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody("hi", ""), "Authorization", "Bearer sk-unknown-key"); resp.StatusCode != 401 || !strings.Contains(string(b), "invalid_api_key") {
		t.Fatalf("unknown key: %d %s", resp.StatusCode, b)
	}
	if resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody("hi", ""), "Authorization", "Bearer sk-acme-very-secret"); resp.StatusCode != 200 {
		t.Fatalf("acme: %d %s", resp.StatusCode, b)
	}
	if resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody("hi", ""), "Authorization", "Bearer test"); resp.StatusCode != 200 {
		t.Fatalf("hashed key: %d %s", resp.StatusCode, b)
	}
	other := strings.Replace(chatBody("hi", ""), "qwen3-8b", "qwen3-8b-v2", 1)
	if resp, b := post(t, gw.URL+"/v1/chat/completions", other, "Authorization", "Bearer sk-acme-very-secret"); resp.StatusCode != 403 || !strings.Contains(string(b), "may not use model") {
		t.Fatalf("disallowed model: %d %s", resp.StatusCode, b)
	}
	for _, r := range s.Requests() {
		if r.Authorization != "" {
			t.Fatalf("the node got Authorization %q: a client's key must never be forwarded", r.Authorization)
		}
	}
	logs := gw.Logs.String()
	if !strings.Contains(logs, `"msg":"request"`) {
		t.Fatal("no access log captured")
	}
	for _, secret := range []string{"sk-acme-very-secret", "sk-unknown-key", "Bearer test", `"content":"hi"`} {
		if strings.Contains(logs, secret) {
			t.Fatalf("the log holds %q:\n%s", secret, logs)
		}
	}
	// With auth off, keyless and unknown-key requests are tenant default.
	cfg.Auth.Required = false
	open := startGateway(t, cfg)
	if resp, b := post(t, open.URL+"/v1/chat/completions", chatBody("hi", ""), "Authorization", "Bearer whatever"); resp.StatusCode != 200 {
		t.Fatalf("auth off: %d %s", resp.StatusCode, b)
	}
	resp, _ := httpClient.Get(open.URL + "/metrics")
	mb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if metricValue(t, string(mb), `frontdoor_tokens_total{tenant="default",kind="completion",source="upstream"}`) < 1 {
		t.Fatal("the default tenant's tokens were not counted")
	}
}

// driveRate sends n requests spaced by gap (open loop) and returns the
// statuses, the Retry-After headers of the rejections, and when each
// request was sent and answered (on a busy machine the sender stalls and
// the ticker drops ticks, so the sends are not evenly spaced, and a request
// can wait between its send and the gateway's decision).
func driveRate(t *testing.T, urls []string, key string, n int, gap time.Duration) (ok, rejected int, badRetry int, sent, answered []time.Time) {
	t.Helper()
	var okN, rejN, bad atomic.Int64
	var wg sync.WaitGroup
	tick := time.NewTicker(gap)
	defer tick.Stop()
	sent, answered = make([]time.Time, n), make([]time.Time, n)
	for i := 0; i < n; i++ {
		<-tick.C
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sent[i] = time.Now()
			req, _ := http.NewRequest("POST", urls[i%len(urls)]+"/v1/chat/completions", strings.NewReader(chatBody(fmt.Sprintf("rate %d", i), `"max_tokens":1`)))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := httpClient.Do(req)
			if err != nil {
				bad.Add(1)
				return
			}
			answered[i] = time.Now()
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case 200:
				okN.Add(1)
			case 429:
				rejN.Add(1)
				if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 {
					bad.Add(1)
				}
			default:
				bad.Add(1)
			}
		}(i)
	}
	wg.Wait()
	return int(okN.Load()), int(rejN.Load()), int(bad.Load()), sent, answered
}

// bucketAdmits is how many of the requests sent at these times a token
// bucket of rate and burst admits.
func bucketAdmits(sent []time.Time, rate, burst float64) int {
	times := slices.SortedFunc(slices.Values(sent), time.Time.Compare)
	tokens, admitted := burst, 0
	for i, at := range times {
		if i > 0 {
			tokens = min(burst, tokens+rate*at.Sub(times[i-1]).Seconds())
		}
		if tokens >= 1 {
			tokens--
			admitted++
		}
	}
	return admitted
}

// A tenant at rps 50, burst 10, driven at 200/s for 10 s gets what an exact
// token bucket admits (510 when the sender keeps time) ± 3%, alone and
// with two gateways sharing one Redis quota. The gateway decides somewhere
// between a request's send and its answer, so the reference is the exact
// bucket over either set of times: on a loaded machine they differ. A
// decision that fell back to the local share (Redis slower than its
// timeout) widens the bound by one.
func TestAdmissionRateAccuracy(t *testing.T) {
	if testing.Short() {
		t.Skip("20 s of load")
	}
	for _, backend := range []string{"local", "redis"} {
		t.Run(backend, func(t *testing.T) {
			s := testenv.GPUSim(t, func(c *sim.Config) { c.MaxNumSeqs = 1000 })
			cfg := testConfig(s)
			cfg.Nodes[0].MaxConcurrency = 1000
			cfg.Logging.AccessLog = false
			t.Setenv("TEST_RATE_KEYS", "sk-rate")
			cfg.Tenants = []Tenant{{Name: "rated", APIKeysEnv: "TEST_RATE_KEYS", RPS: 50, Burst: 10}}
			urls := []string{startGateway(t, cfg).URL}
			if backend == "redis" {
				cfg.Admission.Backend, cfg.Redis.URL, cfg.Admission.Replicas = "redis", testenv.StartRedis(t).URL(), 2
				urls = []string{startGateway(t, cfg).URL, startGateway(t, cfg).URL}
			}
			ok, rej, bad, sent, answered := driveRate(t, urls, "sk-rate", 2000, 5*time.Millisecond)
			bySend, byAnswer := float64(bucketAdmits(sent, 50, 10)), float64(bucketAdmits(answered, 50, 10))
			// A Redis call slower than its timeout (a loaded machine) is
			// decided locally at the quota ÷ replicas, by design and
			// counted: each such decision may admit one request more.
			fallbacks := 0.0
			for _, u := range urls {
				resp, err := httpClient.Get(u + "/metrics")
				if err != nil {
					t.Fatal(err)
				}
				mb, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				fallbacks += metricValue(t, string(mb), "frontdoor_admission_fallback_total")
			}
			t.Logf("%s: admitted %d, rejected %d (an exact bucket over the send times: %.0f, over the answer times: %.0f); %.0f decisions fell back",
				backend, ok, rej, bySend, byAnswer, fallbacks)
			if bad != 0 {
				t.Fatalf("%d requests failed or were rejected without a valid Retry-After", bad)
			}
			if lo, hi := min(bySend, byAnswer), max(bySend, byAnswer); float64(ok) < lo*0.97-fallbacks || float64(ok) > hi*1.03+fallbacks {
				t.Fatalf("admitted %d, want %.0f to %.0f ± 3%% (± %.0f decisions that fell back)", ok, lo, hi, fallbacks)
			}
		})
	}
}

func TestAdmissionTokensAndHits(t *testing.T) {
	s := testenv.GPUSim(t, func(c *sim.Config) { c.OutputTokens = 8 })
	cfg := testConfig(s)
	cfg.Cache.Backend = "memory"
	t.Setenv("TEST_TOK_KEYS", "sk-tok")
	cfg.Tenants = []Tenant{{Name: "tok", APIKeysEnv: "TEST_TOK_KEYS", TokensPerMinute: 1000, RPS: 1000, Burst: 100}}
	cfg.Admission.Global.TokensPerMinute = 100000
	gw := startGateway(t, cfg)
	key := []string{"Authorization", "Bearer sk-tok"}
	// max_tokens alone over the budget: rejected at once.
	resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody("too big", `"max_tokens":5000`), key...)
	if resp.StatusCode != 429 || !strings.Contains(string(b), "tenant_tokens") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("oversize: %d %s", resp.StatusCode, b)
	}
	// 900 tokens up front, settled at about 10: the next 900 fits.
	for i := 0; i < 3; i++ {
		resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody(fmt.Sprintf("refund %d", i), `"max_tokens":900`), key...)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d after settlement: %d %s (unused tokens were not refunded)", i, resp.StatusCode, b)
		}
	}
	// Hits cost no tokens (TestAdmissionHitsCountAgainstRPS shows they do
	// count against rps).
	askStored(t, gw, cbody("cached answer", ""), key...)
	for i := 0; i < 20; i++ {
		if xc, _, _ := ask(t, gw, cbody("cached answer", ""), key...); xc != "hit-exact" {
			t.Fatalf("hit %d: %q", i, xc)
		}
	}
	resp, b = post(t, gw.URL+"/v1/chat/completions", chatBody("fits after many hits", `"max_tokens":900`), key...)
	if resp.StatusCode != 200 {
		t.Fatalf("hits were charged against the token budget: %d %s", resp.StatusCode, b)
	}
}

func TestAdmissionHitsCountAgainstRPS(t *testing.T) {
	s := testenv.GPUSim(t, nil)
	cfg := testConfig(s)
	cfg.Cache.Backend = "memory"
	t.Setenv("TEST_RPS_KEYS", "sk-rps")
	cfg.Tenants = []Tenant{{Name: "slow", APIKeysEnv: "TEST_RPS_KEYS", RPS: 0.1, Burst: 3}}
	gw := startGateway(t, cfg)
	key := []string{"Authorization", "Bearer sk-rps"}
	codes := []int{}
	for i := 0; i < 5; i++ {
		resp, _ := post(t, gw.URL+"/v1/chat/completions", cbody("same question", ""), key...)
		codes = append(codes, resp.StatusCode)
	}
	if fmt.Sprint(codes) != "[200 200 200 429 429]" {
		t.Fatalf("statuses %v: hits must count against the tenant's rps", codes)
	}
}

// 500 clients that abandon their streams: the tenant's in-flight count
// returns to zero, read from /status.
func TestAdmissionConcurrencyUnderAborts(t *testing.T) {
	s := testenv.GPUSim(t, func(c *sim.Config) { c.ITL, c.OutputTokens, c.MaxNumSeqs = 5*time.Millisecond, 200, 1000 })
	cfg := testConfig(s)
	cfg.Nodes[0].MaxConcurrency = 1000
	cfg.Logging.AccessLog = false
	t.Setenv("TEST_CONC_KEYS", "sk-conc")
	cfg.Tenants = []Tenant{{Name: "conc", APIKeysEnv: "TEST_CONC_KEYS", MaxConcurrency: 50}}
	gw := startGateway(t, cfg)
	addr := strings.TrimPrefix(gw.URL, "http://")
	var wg sync.WaitGroup
	var sawStream, limited atomic.Int64
	for i := 0; i < 500; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer conn.Close()
			body := chatBody(fmt.Sprintf("abort %d", i), `"stream":true`)
			fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-conc\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			buf := make([]byte, 512)
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, _ := conn.Read(buf)
			if strings.Contains(string(buf[:n]), " 429 ") {
				limited.Add(1)
				return
			}
			sawStream.Add(1)
			time.Sleep(time.Duration(i%20) * time.Millisecond) // leave mid-stream
		}(i)
	}
	wg.Wait()
	status := func() admin.Status {
		resp, err := httpClient.Get(gw.URL + "/status")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st admin.Status
		_ = json.NewDecoder(resp.Body).Decode(&st)
		return st
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return status().Admission.Inflight["conc"] == 0 },
		"tenant in-flight stuck at %d after all clients left", status().Admission.Inflight["conc"])
	testenv.Eventually(t, 5*time.Second, func() bool { return gw.Pool().Nodes()[0].Inflight() == 0 }, "node in-flight leaked")
	t.Logf("%d streams started and abandoned, %d refused at the concurrency cap", sawStream.Load(), limited.Load())
	if sawStream.Load() == 0 || limited.Load() == 0 {
		t.Fatal("the test did not exercise both the streams and the cap")
	}
}

// TestAdmissionSurvivesRedisOutage: with Redis down, a tenant with rates
// only is served on its local share; a tenant with max_concurrency is
// refused (its cap lives in Redis), loudly: WARN, metric, /status.
func TestAdmissionSurvivesRedisOutage(t *testing.T) {
	s := testenv.GPUSim(t, nil)
	r := testenv.StartRedis(t)
	cfg := testConfig(s)
	cfg.Admission.Backend, cfg.Redis.URL = "redis", r.URL()
	t.Setenv("TEST_OUT_KEYS", "sk-out")
	t.Setenv("TEST_CAP_KEYS", "sk-cap")
	cfg.Tenants = []Tenant{{Name: "out", APIKeysEnv: "TEST_OUT_KEYS", RPS: 1000, Burst: 100, TokensPerMinute: 1000000},
		{Name: "cap", APIKeysEnv: "TEST_CAP_KEYS", MaxConcurrency: 10}}
	gw := startGateway(t, cfg)
	key := []string{"Authorization", "Bearer sk-out"}
	capKey := []string{"Authorization", "Bearer sk-cap"}
	for _, k := range [][]string{key, capKey} {
		if resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody("before", ""), k...); resp.StatusCode != 200 {
			t.Fatalf("before the outage: %d %s", resp.StatusCode, b)
		}
	}
	r.Kill()
	for i := 0; i < 30; i++ {
		if resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody(fmt.Sprintf("during %d", i), ""), key...); resp.StatusCode != 200 {
			t.Fatalf("during the outage: %d %s", resp.StatusCode, b)
		}
	}
	resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody("capped during", ""), capKey...)
	if resp.StatusCode != 429 || !strings.Contains(string(b), "tenant_concurrency") || !strings.Contains(string(b), "Redis") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a capped tenant during the outage: %d %s, want 429 tenant_concurrency naming Redis", resp.StatusCode, b)
	}
	st := gw.adm.Status()
	if st.Redis != "down" || st.Fallbacks == 0 || st.CapRefusals != 1 {
		t.Fatalf("fallback or refusal not counted: %+v", st)
	}
	mresp, err := httpClient.Get(gw.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if metricValue(t, string(mb), "frontdoor_admission_cap_unavailable_total") != 1 {
		t.Fatal("/metrics: frontdoor_admission_cap_unavailable_total is not 1")
	}
	r.Start()
	testenv.Eventually(t, 5*time.Second, func() bool {
		post(t, gw.URL+"/v1/chat/completions", chatBody("after", ""), key...)
		return gw.adm.Status().Redis == "up"
	}, "admission did not go back to Redis")
	if resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody("capped after", ""), capKey...); resp.StatusCode != 200 {
		t.Fatalf("a capped tenant after the outage: %d %s", resp.StatusCode, b)
	}
}
