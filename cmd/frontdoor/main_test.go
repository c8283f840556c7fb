package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"frontdoor/internal/gpusim"
	"frontdoor/internal/testenv"
	"frontdoor/router"
)

// Every example passes check-config --strict once the env vars it names
// are set; without them, --strict fails and a plain check warns.
func TestCheckConfigAcceptsTheExamples(t *testing.T) {
	files, _ := filepath.Glob("../../deploy/examples/*.yaml")
	if len(files) < 2 {
		t.Fatalf("examples: %v", files)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			cfg, err := router.Load(f)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			for _, e := range cfg.EnvVars() {
				t.Setenv(e.Name, "")
				os.Unsetenv(e.Name)
			}
			var out, errOut bytes.Buffer
			if len(cfg.EnvVars()) > 0 {
				if code := run([]string{"check-config", "--strict", "--config", f}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "is not set") {
					t.Fatalf("--strict with %s unset: exit %d: %s", cfg.EnvVars()[0].Name, code, errOut.String())
				}
				errOut.Reset()
				if code := run([]string{"check-config", "--config", f}, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), "warning: ") {
					t.Fatalf("without --strict, an unset env var is a warning: exit %d: %s", code, errOut.String())
				}
			}
			for _, e := range cfg.EnvVars() {
				t.Setenv(e.Name, "c3e1f07a9b5d24e8f61a0c9d7b3e52f4a8c1d06e9f2b7a4c5d8e1f03b6a9c27d")
			}
			out.Reset()
			errOut.Reset()
			if code := run([]string{"check-config", "--strict", "--config", f}, &out, &errOut); code != 0 {
				t.Fatalf("%s: exit %d: %s", f, code, errOut.String())
			}
			if !strings.Contains(out.String(), "ok") || errOut.Len() != 0 {
				t.Fatalf("%s: output %q, stderr %q", f, out.String(), errOut.String())
			}
		})
	}
}

// A placeholder, short or low-entropy admin token is refused by
// check-config and by serve, naming the variable and how to make a good
// one; what openssl rand makes passes.
func TestWeakAdminTokenRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fd.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:0\nnodes:\n  - {name: a, url: http://127.0.0.1:1, models: [m]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"change-me", "replace-me", "CHANGEME", "secret", "admin", "short-token-15b", "change-me-to-a-long-random-value",
		"aaaaaaaaaaaaaaaa", "Password12345678", "frontdoor-admin-token", "0123456789abcdef0123456789abcdef"} {
		t.Setenv("FRONTDOOR_ADMIN_TOKEN", tok)
		var out, errOut bytes.Buffer
		if code := run([]string{"check-config", "--config", path}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "FRONTDOOR_ADMIN_TOKEN") ||
			!strings.Contains(errOut.String(), "generate one with: openssl rand -hex 32") {
			t.Errorf("check-config with FRONTDOOR_ADMIN_TOKEN=%s: exit %d: %s", tok, code, errOut.String())
		}
		errOut.Reset()
		if code := run([]string{"serve", "--config", path}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "environment variable FRONTDOOR_ADMIN_TOKEN") {
			t.Errorf("serve with FRONTDOOR_ADMIN_TOKEN=%s: exit %d: %s", tok, code, errOut.String())
		}
	}
	// openssl rand -hex 16, -hex 32 and -base64 32.
	for _, tok := range []string{"9f86d081884c7d659a2feaa0c55ad015", "daceaf44dfc4febfd23efeadca6e4d359fcf71775f604788821021c15762ab58",
		"yhYW3XQzzew0c/p7ffVaiCCm0DT3v7YaglObAURdusU="} {
		t.Setenv("FRONTDOOR_ADMIN_TOKEN", tok)
		var out, errOut bytes.Buffer
		if code := run([]string{"check-config", "--config", path}, &out, &errOut); code != 0 {
			t.Errorf("check-config with a random token: exit %d: %s", code, errOut.String())
		}
	}
}

func TestCheckConfigReportsEveryProblemWithItsPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	bad := "nodes:\n  - {name: a, url: http://x:1, models: [m]}\n  - {name: b, url: \"127.0.0.1:9001\", models: [m]}\n  - {name: \"c\\r\\nX-Evil: 1\", url: http://x:2, models: [m]}\nbalancer: {policy: fastest}\ntimeouts: {client: 0s}\nserver: {engine: loop, io_uring: auto}\ncache: {bogus: 1, local_index: {list_size: 2, probes: 0}}\n"
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"check-config", "--config", path}, &out, &errOut); code == 0 {
		t.Fatal("a bad config passed")
	}
	// An unknown key and the semantic problems, all in one run.
	for _, want := range []string{`cache.bogus: unknown key "bogus" (line 8)`, "nodes[1].url: missing scheme", `balancer.policy: "fastest"`,
		`nodes[2].name: "c\r\nX-Evil: 1" may only use letters, digits`, "timeouts.client: must be > 0",
		// The event-loop engine is gone: its keys are refused, by name.
		"server.engine: removed in this version: frontdoor has one HTTP server (fasthttp); delete the key",
		"server.io_uring: removed in this version",
		"cache.local_index.list_size must be within 16..1048576, got 2"} {
		if !strings.Contains(errOut.String(), want) {
			t.Fatalf("missing %q in:\n%s", want, errOut.String())
		}
	}
}

// What broke at run time with an "ok" from check-config: each problem with
// its YAML path and line, all at once, in the config's own words.
func TestCheckConfigCatchesRunTimeBreakage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	bad := `listen: "28591"
cache:
  ttl: forever
  max_bytes: lots
  local_index: {ef_search: 64}
nodes:
  - name: a
    url: http://127.0.0.1:9001
    modles: [qwen3-8b]
  - name: b
    url: http://127.0.0.1:9002
    models: [qwen3-8b]
    max_concurency: 4
tenants:
  - {name: acme, models: [qwen3-8b, chat, qwen9]}
balancer:
  retries: many
spillover:
  enabled: true
  model_map: {qwen3-8b: qwen-plus}
models:
  - name: chat
    targets: [{model: qwen3-8b, weight: 90}, {model: qwen3-8b-v2, weight: 10}]
  - name: plus
    targets: [{model: qwen-plus-local, weight: 1}, {model: qwen3-8b, weight: 1}]
`
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"check-config", "--config", path}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	got := errOut.String()
	for _, want := range []string{
		`listen: "28591" has no host part: write ":28591"`,
		`cache.ttl: invalid duration "forever" (use units such as 50ms, 2s, 10m) (line 3)`,
		`cache.max_bytes: invalid size "lots"`, "(line 4)",
		"nodes[0].modles: unknown key \"modles\" (did you mean `models`?) (line 9)",
		"nodes[1].max_concurency: unknown key \"max_concurency\" (did you mean `max_concurrency`?) (line 13)",
		`balancer.retries: "many" is not an integer (line 17)`,
		`models[0].targets[1].model: "qwen3-8b-v2" is served by no node and is not in spillover.model_map`,
		`models[1].targets[0].model: "qwen-plus-local" is served by no node`,
		`tenants[0].models[2]: "qwen9" is neither a served model nor an alias`,
		"spillover.api_key_env: environment variable DASHSCOPE_API_KEY is not set",
		`cache.local_index.ef_search: removed key "ef_search": the in-process index is an inverted file now, not a graph; its settings are list_size, probes and rerank (docs/config.md) (line 5)`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	for _, never := range []string{"balancer.NodeConfig", "not found in type", "into int", `tenants[0].models[1]`, `models[0].targets[0]`} {
		if strings.Contains(got, never) {
			t.Errorf("%q in:\n%s", never, got)
		}
	}
	// A listen address with a host parses; a bad port does not.
	for addr, ok := range map[string]bool{":8080": true, "127.0.0.1:0": true, "[::1]:8080": true, "localhost:99999": false, "28591": false} {
		err := os.WriteFile(path, []byte("listen: \""+addr+"\"\nnodes:\n  - {name: a, url: http://127.0.0.1:1, models: [m]}\n"), 0o600)
		if err != nil {
			t.Fatal(err)
		}
		errOut.Reset()
		if code := run([]string{"check-config", "--config", path}, &out, &errOut); (code == 0) != ok {
			t.Errorf("listen %q: exit %d: %s", addr, code, errOut.String())
		}
	}
}

// Configs written for the event-loop engine are refused with a message
// that says what to do; other keys under server: are unknown.
func TestCheckConfigRefusesTheEngineKeys(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ server, want string }{
		{"{engine: fasthttp}", "server.engine: removed in this version: frontdoor has one HTTP server (fasthttp); delete the key"},
		{"{loops: 2}", "server.loops: removed in this version"},
		{"{io_uring: off}", "server.io_uring: removed in this version"},
		{"{threads: 2}", `server.threads: unknown key "threads"`},
	} {
		path := filepath.Join(dir, "c.yaml")
		cfg := "nodes:\n  - {name: a, url: http://127.0.0.1:1, models: [m]}\nserver: " + tc.server + "\n"
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		if code := run([]string{"check-config", "--config", path}, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), tc.want) {
			t.Fatalf("server: %s: exit %d, want %q in:\n%s", tc.server, code, tc.want, errOut.String())
		}
	}
}

func TestUsageAndVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(nil, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "Usage") {
		t.Fatalf("no args: exit %d %q", code, errOut.String())
	}
	if code := run([]string{"version"}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "frontdoor ") {
		t.Fatalf("version: exit %d %q", code, out.String())
	}
	if code := run([]string{"serve"}, &out, &errOut); code != 2 {
		t.Fatalf("serve without --config: exit %d", code)
	}
}

// The version comes from -ldflags when set, else from the build info: the
// VCS revision of the checkout it was built from.
func TestVersionFromTheBuild(t *testing.T) {
	dir := t.TempDir()
	build := func(name string, args ...string) string {
		bin := filepath.Join(dir, name)
		if b, err := goBuild(append(args, "-o", bin, ".")...).CombinedOutput(); err != nil {
			t.Fatalf("build %v: %v\n%s", args, err, b)
		}
		out, err := exec.Command(bin, "version").CombinedOutput()
		if err != nil {
			t.Fatalf("version: %v %s", err, out)
		}
		return string(out)
	}
	// Go stamps the revision only where .git is a directory (not in a git
	// worktree, whose .git is a file); `make build` passes -ldflags there.
	if st, err := os.Stat("../../.git"); err != nil || !st.IsDir() {
		t.Logf("../../.git is not a directory: the build-info revision is not checked")
	} else if rev, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		// GOFLAGS may say -buildvcs=false; the flag wins.
		want := strings.TrimSpace(string(rev))[:12]
		if out := build("vcs", "-buildvcs=true"); !strings.Contains(out, "(rev "+want) {
			t.Fatalf("version %q does not name the revision %s", out, want)
		}
	} else {
		t.Logf("no git checkout: the VCS revision is not checked (%v)", err)
	}
	ld := "-X frontdoor/internal/buildinfo.version=v9.8.7 -X frontdoor/internal/buildinfo.revision=0123456789abcdef"
	if out := build("ld", "-ldflags", ld); !strings.HasPrefix(out, "frontdoor v9.8.7 (rev 0123456789ab, go") {
		t.Fatalf("version with ldflags: %q", out)
	}
}

// The demo serves chat completions, streamed and not, and stops on cancel.
func TestDemoServes(t *testing.T) {
	t.Run("local embedder", func(t *testing.T) { testDemoServes(t, false) })
	t.Run("remote embedder", func(t *testing.T) { testDemoServes(t, true) })
}

func testDemoServes(t *testing.T, remoteEmbed bool) {
	ctx, cancel := context.WithCancel(context.Background())
	stdout := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- runDemo(ctx, "127.0.0.1:0", "127.0.0.1:0", time.Millisecond, time.Millisecond, "", remoteEmbed, stdout, io.Discard)
	}()
	var base, dashboard string
	testenv.Eventually(t, 10*time.Second, func() bool {
		m := regexp.MustCompile(`gateway\s+(http://\S+)/v1`).FindStringSubmatch(stdout.String())
		d := regexp.MustCompile(`dashboard\s+(http://\S+)`).FindStringSubmatch(stdout.String())
		if m != nil && d != nil {
			base, dashboard = m[1], d[1]
		}
		return m != nil && d != nil
	}, "no banner: %s", stdout.String())
	// The dashboard the banner names opens with no token (the admin
	// listener, on loopback); the main listener's needs the token.
	for url, want := range map[string]int{dashboard: 200, base + "/dashboard": 403, base + "/status": 403} {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", url, resp.StatusCode, want)
		}
	}
	if !strings.HasPrefix(dashboard, "http://127.0.0.1:") || strings.HasPrefix(dashboard, base) {
		t.Errorf("the dashboard %s is not on a loopback listener of its own (gateway %s)", dashboard, base)
	}
	for _, body := range []string{
		`{"model":"qwen3-8b","messages":[{"role":"user","content":"hello"}]}`,
		`{"model":"chat","stream":true,"messages":[{"role":"user","content":"hello"}]}`,
	} {
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), gpusim.ExpectedText("hello", 3)[:5]) {
			t.Fatalf("demo answered %d: %s", resp.StatusCode, b)
		}
	}
	ask := func(q string) string {
		resp, err := http.Post(base+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"qwen3-8b","messages":[{"role":"user","content":"`+q+`"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.Header.Get("X-Cache")
	}
	if !remoteEmbed {
		// The banner's reworded question is a semantic hit, which the demo's
		// judge audits: /status (on the admin listener) shows the verdict.
		// The first answer's write-back is asynchronous: asked before it
		// lands, the reworded question would miss and be stored under its
		// own key, and every later try would be an exact hit.
		testenv.Eventually(t, 5*time.Second, func() bool { return ask("Hello, who are you?") == "hit-exact" }, "the banner's question was never stored")
		testenv.Eventually(t, 5*time.Second, func() bool { return ask("hello who are you") == "hit-semantic" }, "the banner's reworded question is no semantic hit")
		adminBase := strings.TrimSuffix(dashboard, "/dashboard")
		testenv.Eventually(t, 10*time.Second, func() bool {
			resp, err := http.Get(adminBase + "/status")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var st struct {
				Cache struct {
					Verify struct {
						FalseHitRate struct{ Samples int } `json:"false_hit_rate"`
					} `json:"verify"`
				} `json:"cache"`
			}
			return json.NewDecoder(resp.Body).Decode(&st) == nil && st.Cache.Verify.FalseHitRate.Samples >= 1
		}, "the demo's judge never judged the semantic hit")
	}
	if remoteEmbed {
		if !strings.Contains(stdout.String(), "/v1/embeddings (simulated") {
			t.Errorf("the banner does not name the remote embedder:\n%s", stdout.String())
		}
		// A reworded question is a semantic hit through the remote embedder.
		testenv.Eventually(t, 5*time.Second, func() bool { return ask("What is the capital of France?") == "hit-exact" }, "the question was never stored")
		testenv.Eventually(t, 5*time.Second, func() bool { return ask("Please, what is the capital of France") == "hit-semantic" },
			"no semantic hit through the remote embedder")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("demo: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("demo did not stop")
	}
}

// SIGTERM during a stream: the stream finishes, new connections are refused
// and the process exits 0, writing the log lines it still buffers.
func TestSIGTERMDrainsStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	node := testenv.GPUSim(t, func(c *gpusim.Config) { c.ITL, c.OutputTokens = 40*time.Millisecond, 40 })
	// Log lines wait a minute, far longer than the test: only the flush
	// at exit can write the stream's access-log line.
	base, cmd, logs := startServe(t, fmt.Sprintf("shutdown: {grace: 10s}\nlogging: {flush_interval: 1m}\nnodes:\n  - {name: a, url: %s, models: [qwen3-8b]}\n", node.URL()))
	addr := strings.TrimPrefix(base, "http://")

	resp, err := http.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"qwen3-8b","stream":true,"messages":[{"role":"user","content":"long"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, "new connections still accepted after SIGTERM")
	rest, err := io.ReadAll(br)
	if err != nil || !strings.Contains(string(rest), "data: [DONE]") || strings.Count(string(rest), "data: ") < 40 {
		t.Fatalf("stream cut by shutdown (err %v): %d events", err, strings.Count(string(rest), "data: "))
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case err := <-waitErr:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("process did not exit after the stream finished")
	}
	if out := logs.String(); !strings.Contains(out, `"msg":"request"`) || !strings.Contains(out, `"stream":true`) || !strings.Contains(out, "shutting down") {
		t.Fatalf("buffered log lines lost at exit:\n%s", out)
	}
}

// lockedBuffer collects a process's output while it runs.
type lockedBuffer = testenv.Buffer

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildOut  []byte
)

// buildBinary builds cmd/frontdoor once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "frontdoor-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "frontdoor")
		buildOut, buildErr = goBuild("-o", binPath, ".").CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("build: %v\n%s", buildErr, buildOut)
	}
	return binPath
}

// startServe runs `frontdoor serve` with cfg (a listen address is added)
// and waits until it answers.
func startServe(t *testing.T, cfg string) (base string, cmd *exec.Cmd, logs *lockedBuffer) {
	t.Helper()
	base, cmd, logs, _ = startServeEnv(t, cfg, nil)
	return base, cmd, logs
}

// startServeEnv is startServe with extra environment variables; it also
// returns the config file's path, for reload tests.
func startServeEnv(t *testing.T, cfg string, env []string) (base string, cmd *exec.Cmd, logs *lockedBuffer, path string) {
	t.Helper()
	port := testenv.FreePort(t)
	path = filepath.Join(t.TempDir(), "fd.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\n%s", port, cfg)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(buildBinary(t), "serve", "--config", path)
	cmd.Env = append(os.Environ(), env...)
	logs = &lockedBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	base = fmt.Sprintf("http://127.0.0.1:%d", port)
	testenv.Eventually(t, 10*time.Second, func() bool {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, "frontdoor did not start: %s", logs.String())
	return base, cmd, logs, path
}

// lazyString formats as its function's result when a message is printed.
type lazyString func() string

func (f lazyString) String() string { return f() }

// Two gateway processes share one plain Redis: an answer cached through
// one is an exact and a semantic hit on the other.
func TestTwoProcessesShareTheCache(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	node := testenv.GPUSim(t, nil)
	r := testenv.StartRedis(t)
	cfg := fmt.Sprintf("cache: {backend: redis}\nredis: {url: %s}\nnodes:\n  - {name: a, url: %s, models: [qwen3-8b]}\n", r.URL(), node.URL())
	env := []string{"FRONTDOOR_ADMIN_TOKEN=" + testAdminToken}
	a, _, _, _ := startServeEnv(t, cfg, env)
	b, _, logsB, _ := startServeEnv(t, cfg, env)
	ask := func(base, question string) string {
		resp, err := http.Post(base+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"qwen3-8b","messages":[{"role":"user","content":"`+question+`"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return resp.Header.Get("X-Cache")
	}
	stats := func(base string) string {
		req, _ := http.NewRequest(http.MethodGet, base+"/admin/cache/stats", nil)
		req.Header.Set("Authorization", "Bearer "+testAdminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	if xc := ask(a, "Which ocean is the largest?"); xc != "miss" {
		t.Fatalf("first ask on A: %q", xc)
	}
	// A's write-back is asynchronous; A's own index has the vector once
	// the write is in Redis. Asking B before that would be a miss that B
	// writes back itself, and B's index would then hold two vectors.
	testenv.Eventually(t, 10*time.Second, func() bool { return strings.Contains(stats(a), `"vector_entries":1`) },
		"A's write-back did not finish: %s", lazyString(func() string { return stats(a) }))
	if xc := ask(b, "Which ocean is the largest?"); xc != "hit-exact" {
		t.Fatalf("the answer cached through A is %q on B, want hit-exact", xc)
	}
	// Wait until B's vector index has A's entry (synced through a Redis
	// Stream), then ask reworded.
	testenv.Eventually(t, 10*time.Second, func() bool { return strings.Contains(stats(b), `"vector_entries":1`) },
		"A's vector never reached B's index; B's stats: %s; B's log:\n%s", lazyString(func() string { return stats(b) }), logsB)
	received := node.Stats().Received
	if xc := ask(b, "which ocean is the largest"); xc != "hit-semantic" {
		t.Fatalf("reworded on B: %q", xc)
	}
	if node.Stats().Received != received {
		t.Fatal("B's hits reached the node")
	}
}

// frontdoor demo --warm FILE warms in the background: /status shows the
// job, and the file's prompts are then exact hits.
func TestDemoWarm(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- runDemo(ctx, "127.0.0.1:0", "127.0.0.1:0", time.Millisecond, time.Millisecond, "../../deploy/examples/hot-prompts.txt", false, stdout, io.Discard)
	}()
	var base, admin string
	testenv.Eventually(t, 10*time.Second, func() bool {
		m := regexp.MustCompile(`gateway\s+(http://\S+)/v1`).FindStringSubmatch(stdout.String())
		a := regexp.MustCompile(`admin\s+(http://\S+)`).FindStringSubmatch(stdout.String())
		if m != nil && a != nil {
			base, admin = m[1], a[1]
		}
		return m != nil && a != nil
	}, "no banner: %s", stdout.String())
	var status string
	testenv.Eventually(t, 20*time.Second, func() bool {
		resp, err := http.Get(admin + "/status")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		status = string(b)
		return strings.Contains(status, `"source":"warm.files","state":"done"`)
	}, "no finished warm-up in /status: %s", status)
	if !strings.Contains(status, `"total":20,"done":20,"warmed":20`) {
		t.Fatalf("warm-up in /status: %s", status)
	}
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(userBody("如何重置我的密码？")))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if xc := resp.Header.Get("X-Cache"); xc != "hit-exact" {
		t.Fatalf("a warmed prompt: X-Cache %q", xc)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("demo: %v", err)
	}
}
