package router

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"frontdoor/balancer"
	"frontdoor/internal/testenv"
)

// testAdminToken is the admin token withAdminToken sets: tests that read
// /admin/* and /status with it pass whatever admin.allow_cidrs says.
const testAdminToken = "8b57e561cf96832a31c60516a3a53a55e91a22fe27bc67a9eb0d47e90a4e1ec0"

// withAdminToken makes testAdminToken cfg's admin token.
func withAdminToken(t *testing.T, cfg *Config) {
	t.Setenv("FRONTDOOR_TEST_ADMIN_TOKEN", testAdminToken)
	cfg.Admin.TokenEnv = "FRONTDOOR_TEST_ADMIN_TOKEN"
}

// adminGet GETs an admin path with testAdminToken and wants a 200.
func adminGet(t *testing.T, gw *testGateway, path string) []byte {
	t.Helper()
	status, body := adminDo(t, http.MethodGet, gw.URL+path, "", "Authorization", "Bearer "+testAdminToken)
	if status != 200 {
		t.Fatalf("GET %s: %d %s", path, status, body)
	}
	return body
}

// Credentials in a node URL (http://user:password@host) are masked
// wherever the URL is shown or logged: /admin/nodes, /status, the WARN
// line of a failed probe, errors sent to clients and /metrics. The probes
// still send them: a node whose /health wants them is healthy.
func TestNodeURLCredentialsNeverShown(t *testing.T) {
	const user, password = "fd-node-user", "Pa55-w0rd-9c4e1b"
	secured := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != password {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(secured.Close)
	closed := testenv.FreePort(t) // nothing listens: the probe fails

	cfg := testConfig()
	withAdminToken(t, &cfg)
	cfg.Balancer.HealthInterval = 50e6
	cfg.Nodes = []balancer.NodeConfig{
		{Name: "down", URL: fmt.Sprintf("http://%s:%s@127.0.0.1:%d/v1", user, password, closed), Kind: "vllm",
			Models: []string{"qwen3-8b"}, MaxConcurrency: 4, Weight: 1},
		{Name: "secured", URL: "http://" + user + ":" + password + "@" + strings.TrimPrefix(secured.URL, "http://") + "/v1", Kind: "openai",
			Models: []string{"other-model"}, MaxConcurrency: 4, Weight: 1},
	}
	gw := startGateway(t, cfg)

	type nodeStatus struct {
		Name, URL, State string
		ProbeError       string `json:"probe_error"`
	}
	nodes := func() map[string]nodeStatus {
		var ns []nodeStatus
		if err := json.Unmarshal(adminGet(t, gw, "/admin/nodes"), &ns); err != nil {
			t.Fatal(err)
		}
		out := map[string]nodeStatus{}
		for _, n := range ns {
			out[n.Name] = n
		}
		return out
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		n := nodes()
		return n["down"].State == "unhealthy" && n["secured"].State == "healthy" &&
			strings.Contains(gw.Logs.String(), "node unhealthy")
	}, "nodes %+v; logs:\n%s", nodes(), gw.Logs.String())
	down := nodes()["down"]
	if !strings.Contains(gw.Logs.String(), "xxxxx@127.0.0.1") {
		t.Fatalf("the WARN line of the failed probe does not show the masked URL:\n%s", gw.Logs.String())
	}
	if want := fmt.Sprintf("http://xxxxx@127.0.0.1:%d/v1", closed); down.URL != want || !strings.Contains(down.ProbeError, "xxxxx@127.0.0.1") {
		t.Fatalf("down node shown as %q, probe error %q; want url %q", down.URL, down.ProbeError, want)
	}
	// A request that finds no usable node: the error the client gets.
	resp, answer := post(t, gw.URL+"/v1/chat/completions", chatBody("hello", ""))
	if resp.StatusCode < 500 {
		t.Fatalf("status %d: %s", resp.StatusCode, answer)
	}

	for what, text := range map[string]string{
		"/admin/nodes":   string(adminGet(t, gw, "/admin/nodes")),
		"/status":        string(adminGet(t, gw, "/status")),
		"/metrics":       metricsText(t, gw),
		"the log":        gw.Logs.String(),
		"a client error": string(answer),
	} {
		for _, secret := range []string{password, user} {
			if strings.Contains(text, secret) {
				t.Errorf("%s shows %q:\n%s", what, secret, grepLines(text, secret))
			}
		}
	}
}
