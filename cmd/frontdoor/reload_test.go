package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
)

// loadResult counts a load generator's requests.
type loadResult struct {
	total, failed atomic.Int64
	mu            sync.Mutex
	firstErr      string
}

func (r *loadResult) fail(format string, args ...any) {
	r.failed.Add(1)
	r.mu.Lock()
	if r.firstErr == "" {
		r.firstErr = fmt.Sprintf(format, args...)
	}
	r.mu.Unlock()
}

var loadClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 100}}

// chat sends one chat request (a stream when stream is set) and reports
// whether it fully succeeded: 200 and, for a stream, [DONE].
func chat(base, key string, stream bool) (status int, err error) {
	body := `{"model":"qwen3-8b","messages":[{"role":"user","content":"hello"}]`
	if stream {
		body += `,"stream":true`
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body+"}"))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := loadClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, fmt.Errorf("body: %w", err)
	}
	if resp.StatusCode != 200 {
		return resp.StatusCode, fmt.Errorf("answer %.300s (X-Upstream-Attempts %q)", b, resp.Header.Get("X-Upstream-Attempts"))
	}
	if stream && !strings.Contains(string(b), "data: [DONE]") {
		return resp.StatusCode, fmt.Errorf("stream without [DONE]: %q", b)
	}
	return resp.StatusCode, nil
}

// runLoad sends requests from workers goroutines until stop is closed:
// streams only when streamsOnly is set, otherwise streams and plain answers
// in turn.
func runLoad(base func() string, key string, workers int, streamsOnly bool, stop <-chan struct{}) (*loadResult, *sync.WaitGroup) {
	res := &loadResult{}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				stream := streamsOnly || (w+i)%2 == 0
				status, err := chat(base(), key, stream)
				res.total.Add(1)
				if err != nil || status != 200 {
					res.fail("stream %v: status %d, error %v", stream, status, err)
				}
			}
		})
	}
	return res, &wg
}

func writeConfig(t *testing.T, path, listen, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("listen: "+listen+"\n"+body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Under load, SIGHUP applies a config that lowers a tenant's rps, adds a
// node and removes one: no request fails, the new node serves, the removed
// one gets nothing new, the tenant is limited. Configs that fail
// check-config or change listen are refused, by SIGHUP and by POST
// /admin/reload (admin only), and the old one keeps serving.
func TestSIGHUPReloadsUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	sims := map[string]*gpusim.Server{}
	for _, n := range []string{"a", "b", "c"} {
		sims[n] = testenv.GPUSim(t, func(c *gpusim.Config) { c.ITL, c.OutputTokens = 5*time.Millisecond, 20 })
	}
	cfg := func(rps int, nodes ...string) string {
		s := "cache: {backend: off}\nadmin: {token_env: FD_TEST_ADMIN, allow_cidrs: []}\nlogging: {flush_interval: 0s, access_log: false}\n" +
			"balancer: {health_interval: 100ms}\nauth: {required: true}\ntenants:\n" +
			"  - {name: load, api_keys_env: FD_TEST_LOAD_KEYS}\n" +
			fmt.Sprintf("  - {name: acme, api_keys_env: FD_TEST_ACME_KEYS, rps: %d, burst: %d}\n", rps, rps) +
			"nodes:\n"
		for _, n := range nodes {
			s += fmt.Sprintf("  - {name: %s, url: %s, models: [qwen3-8b]}\n", n, sims[n].URL())
		}
		return s
	}
	base, cmd, logs, path := startServeEnv(t, cfg(1000, "a", "b"),
		[]string{"FD_TEST_ADMIN=a8f8e432998d9af0701319da19bf179f744814bc9d3436fa0ac818363e7bdaa4", "FD_TEST_LOAD_KEYS=sk-load", "FD_TEST_ACME_KEYS=sk-acme"})
	listen := strings.TrimPrefix(base, "http://")

	burst := func() (ok, limited int) {
		for i := 0; i < 20; i++ {
			switch status, _ := chat(base, "sk-acme", false); status {
			case 200:
				ok++
			case 429:
				limited++
			}
		}
		return ok, limited
	}
	if ok, _ := burst(); ok != 20 {
		t.Fatalf("acme at rps 1000: %d of 20 passed", ok)
	}

	stop := make(chan struct{})
	res, wg := runLoad(func() string { return base }, "sk-load", 8, false, stop)
	time.Sleep(500 * time.Millisecond)

	reloads := func() int { return strings.Count(logs.String(), `"msg":"config reloaded"`) }
	refusals := func() int {
		return strings.Count(logs.String(), `"msg":"config reload refused; the running config is unchanged"`)
	}
	writeConfig(t, path, listen, cfg(1, "b", "c"))
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return reloads() == 1 }, "no reload logged:\n%s", logs.String())
	aAfter := sims["a"].Stats().Received
	testenv.Eventually(t, 5*time.Second, func() bool { return sims["c"].Stats().Received > 0 }, "the added node serves nothing: %s\nload %d failed %d %s\n%s", adminGet(t, base+"/admin/nodes", "a8f8e432998d9af0701319da19bf179f744814bc9d3436fa0ac818363e7bdaa4"), res.total.Load(), res.failed.Load(), res.firstErr, logs.String())
	time.Sleep(300 * time.Millisecond)
	if got := sims["a"].Stats().Received; got != aAfter {
		t.Fatalf("the removed node received %d requests after the reload", got-aAfter)
	}
	if ok, limited := burst(); ok > 3 || limited < 17 {
		t.Fatalf("acme at rps 1: %d passed, %d limited", ok, limited)
	}

	// An invalid config by SIGHUP: refused, named, the old one serves.
	writeConfig(t, path, listen, cfg(1, "b", "c")+"warm: {concurrency: 0}\n")
	_ = cmd.Process.Signal(syscall.SIGHUP)
	testenv.Eventually(t, 5*time.Second, func() bool { return refusals() == 1 }, "no refusal logged:\n%s", logs.String())
	if !strings.Contains(logs.String(), `warm.concurrency: must be >= 1`) {
		t.Fatalf("the refusal does not name the problem:\n%s", logs.String())
	}

	// A new listen address by POST /admin/reload: admin only, then refused
	// as needing a restart.
	writeConfig(t, path, "127.0.0.1:1", cfg(1, "b", "c"))
	post := func(token string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/admin/reload", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := loadClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := post(""); code != 403 {
		t.Fatalf("POST /admin/reload without the token: %d", code)
	}
	if code, body := post("a8f8e432998d9af0701319da19bf179f744814bc9d3436fa0ac818363e7bdaa4"); code != 422 || !strings.Contains(body, `"restart_required":["listen"]`) {
		t.Fatalf("listen change: %d %s", code, body)
	}
	// Back to a good config through the endpoint: applied.
	writeConfig(t, path, listen, cfg(1000, "a", "b", "c"))
	if code, body := post("a8f8e432998d9af0701319da19bf179f744814bc9d3436fa0ac818363e7bdaa4"); code != 200 {
		t.Fatalf("good config: %d %s", code, body)
	}
	time.Sleep(300 * time.Millisecond)

	close(stop)
	wg.Wait()
	t.Logf("load: %d requests, %d failed; reloads %d, refusals %d", res.total.Load(), res.failed.Load(), reloads(), refusals())
	if res.failed.Load() != 0 {
		t.Fatalf("%d of %d requests failed, e.g. %s", res.failed.Load(), res.total.Load(), res.firstErr)
	}
	if res.total.Load() < 50 {
		t.Fatalf("only %d requests: no load", res.total.Load())
	}
	if ok, _ := burst(); ok != 20 {
		t.Fatalf("acme back at rps 1000: %d of 20 passed", ok)
	}
}

func adminGet(t *testing.T, url, token string) string {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := loadClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
