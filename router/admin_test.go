package router

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"frontdoor/internal/testenv"
)

// adminPaths are the admin surface: every one needs the token, the admin
// listener or (when configured) a trusted peer.
var adminPaths = []string{"/admin/nodes", "/admin/dashboard/history", "/admin/cache/stats", "/admin/cache/hot", "/status", "/dashboard", "/debug/pprof/", "/debug/pprof/goroutine?debug=1"}

const testToken = "a8f8e432998d9af0701319da19bf179f744814bc9d3436fa0ac818363e7bdaa4"

// serveAdmin opens the gateway's admin listener on a loopback port.
func serveAdmin(t *testing.T, gw *testGateway) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gw.ServeAdmin(ln) }()
	return "http://" + ln.Addr().String()
}

// tokenGateway is a gateway with the default admin: section and the
// admin token set, its cache on (so that every admin path answers 200).
func tokenGateway(t *testing.T) *testGateway {
	t.Helper()
	t.Setenv("FRONTDOOR_ADMIN_TOKEN", testToken)
	cfg := testConfig(testenv.GPUSim(t, nil))
	cfg.Admin = DefaultConfig().Admin
	cfg.Admin.ShowCachedQuestions = true // the hot list answers
	cfg.Cache.Backend = "memory"
	return startGateway(t, cfg)
}

// With nothing set under admin:, no request on the main listener reaches
// the admin surface without the token, not even from loopback (where a
// reverse proxy or a sidecar connects from), whatever it claims in
// forwarding headers; with the token, every path answers.
func TestAdminDefaultNeedsTheToken(t *testing.T) {
	gw := tokenGateway(t)
	for _, p := range adminPaths {
		for _, h := range [][]string{nil, {"X-Forwarded-For", "127.0.0.1"}, {"X-Real-Ip", "127.0.0.1"},
			{"Authorization", "Bearer " + testToken + "x"}, {"Authorization", "Basic " + testToken}, {"Authorization", "Bearer"}} {
			if code, b := adminDo(t, http.MethodGet, gw.URL+p, "", h...); code != 403 || !strings.Contains(string(b), "admin_forbidden") {
				t.Errorf("GET %s from loopback with %q: %d %s", p, h, code, b)
			}
		}
		if code, b := adminDo(t, http.MethodGet, gw.URL+p, "", "Authorization", "Bearer "+testToken); code != 200 {
			t.Errorf("GET %s with the token: %d %s", p, code, b)
		}
	}
	if code, _ := adminDo(t, http.MethodPost, gw.URL+"/admin/reload", ""); code != 403 {
		t.Errorf("POST /admin/reload without the token: %d", code)
	}
	if code, _ := adminDo(t, http.MethodDelete, gw.URL+"/admin/cache?namespace=default", ""); code != 403 {
		t.Errorf("DELETE /admin/cache without the token: %d", code)
	}
	// The public routes stay public.
	for _, p := range []string{"/healthz", "/metrics", "/v1/models"} {
		if code, _ := adminDo(t, http.MethodGet, gw.URL+p, ""); code != 200 {
			t.Errorf("GET %s: %d", p, code)
		}
	}
}

// With no token set and no admin listener, the admin surface is closed:
// an empty bearer does not match an empty token.
func TestAdminClosedWithoutToken(t *testing.T) {
	t.Setenv("FRONTDOOR_ADMIN_TOKEN", "")
	cfg := testConfig(testenv.GPUSim(t, nil))
	cfg.Admin = DefaultConfig().Admin
	gw := startGateway(t, cfg)
	for _, auth := range []string{"", "Bearer ", "Bearer  "} {
		if code, _ := adminDo(t, http.MethodGet, gw.URL+"/status", "", "Authorization", auth); code != 403 {
			t.Errorf("GET /status with Authorization %q: %d", auth, code)
		}
	}
}

// The admin listener serves every route with no token, impersonation of a
// tenant included; it refuses a DNS name in Host (DNS rebinding) and what a
// browser sends for another site (CSRF). The main listener still needs the
// token.
func TestAdminListener(t *testing.T) {
	t.Setenv("FRONTDOOR_ADMIN_TOKEN", "")
	t.Setenv("TEST_ACME_KEYS", "sk-acme-1")
	cfg := testConfig(testenv.GPUSim(t, nil))
	cfg.Admin = DefaultConfig().Admin
	cfg.Admin.ShowCachedQuestions = true // the hot list answers
	cfg.Cache.Backend = "memory"
	cfg.Tenants = []Tenant{{Name: "acme", APIKeysEnv: "TEST_ACME_KEYS"}}
	gw := startGateway(t, cfg)
	admin := serveAdmin(t, gw)
	for _, p := range adminPaths {
		if code, b := adminDo(t, http.MethodGet, admin+p, ""); code != 200 {
			t.Errorf("admin listener GET %s: %d %s", p, code, b)
		}
		if code, _ := adminDo(t, http.MethodGet, gw.URL+p, ""); code != 403 {
			t.Errorf("main listener GET %s: %d", p, code)
		}
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(admin, "http://"))
	for _, host := range []string{"localhost:" + port, "[::1]:" + port, "10.0.0.7:" + port, "app.localhost:" + port} {
		if code, b := adminDo(t, http.MethodGet, admin+"/status", "", "Host", host); code != 200 {
			t.Errorf("Host %s: %d %s", host, code, b)
		}
	}
	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.1.nip.io:" + port} {
		if code, b := adminDo(t, http.MethodGet, admin+"/status", "", "Host", host); code != 403 || !strings.Contains(string(b), "admin_host_forbidden") {
			t.Errorf("Host %s (DNS rebinding): %d %s", host, code, b)
		}
	}
	self := strings.TrimPrefix(admin, "http://")
	for _, h := range [][]string{{"Origin", "https://evil.example"}, {"Origin", "null"}, {"Origin", "http://127.0.0.1:1"},
		{"Sec-Fetch-Site", "cross-site"}, {"Sec-Fetch-Site", "same-site"}} {
		if code, b := adminDo(t, http.MethodPost, admin+"/admin/reload", "", h...); code != 403 || !strings.Contains(string(b), "admin_cross_origin") {
			t.Errorf("POST /admin/reload with %q: %d %s", h, code, b)
		}
	}
	// Each refusal is counted and logged (the rebinding and cross-site
	// ones above: 3 + 5).
	if _, m := adminDo(t, http.MethodGet, gw.URL+"/metrics", ""); !strings.Contains(string(m), `frontdoor_transport_refusals_total{reason="admin_origin"} 8`) {
		t.Errorf("refusals not counted:\n%s", grepLines(string(m), "transport_refusals"))
	}
	if !strings.Contains(gw.Logs.String(), "admin_origin") {
		t.Errorf("no WARN line for the refusals:\n%s", gw.Logs.String())
	}
	// The dashboard's own fetch of /status is same-origin.
	if code, b := adminDo(t, http.MethodGet, admin+"/status", "", "Origin", "http://"+self, "Sec-Fetch-Site", "same-origin"); code != 200 {
		t.Errorf("same-origin fetch: %d %s", code, b)
	}
	// Inference works there too, and may act for a tenant (frontdoor warm).
	body := `{"model":"qwen3-8b","messages":[{"role":"user","content":"hello there"}]}`
	resp, b := post(t, admin+"/v1/chat/completions", body, "X-Frontdoor-Tenant", "acme")
	if resp.StatusCode != 200 {
		t.Fatalf("chat on the admin listener: %d %s", resp.StatusCode, b)
	}
	// Stored in acme's namespace: a hit for acme's key, a miss for the
	// default tenant.
	eventuallyHit(t, gw, body, "hit-exact", "Authorization", "Bearer sk-acme-1")
	if resp, _ := post(t, gw.URL+"/v1/chat/completions", body); resp.Header.Get("X-Cache") != "miss" {
		t.Errorf("the default tenant got %q for acme's entry", resp.Header.Get("X-Cache"))
	}
}

// admin.allow_cidrs, when configured, trusts peers by address, behind the
// same browser checks as the admin listener.
func TestAdminAllowCIDRs(t *testing.T) {
	t.Setenv("FRONTDOOR_ADMIN_TOKEN", "")
	cfg := testConfig(testenv.GPUSim(t, nil))
	cfg.Admin.AllowCIDRs = []string{"127.0.0.0/8"}
	gw := startGateway(t, cfg)
	if code, _ := adminDo(t, http.MethodGet, gw.URL+"/status", ""); code != 200 {
		t.Errorf("/status from an allowed peer: %d", code)
	}
	if code, _ := adminDo(t, http.MethodGet, gw.URL+"/status", "", "Host", "rebind.example"); code != 403 {
		t.Errorf("/status from an allowed peer with a DNS name in Host: %d", code)
	}
	if code, _ := adminDo(t, http.MethodPost, gw.URL+"/admin/reload", "", "Origin", "https://evil.example"); code != 403 {
		t.Errorf("cross-origin POST from an allowed peer: %d", code)
	}
	cfg.Admin.AllowCIDRs = []string{"10.0.0.0/8"}
	gw = startGateway(t, cfg)
	if code, _ := adminDo(t, http.MethodGet, gw.URL+"/status", ""); code != 403 {
		t.Errorf("/status from a peer outside allow_cidrs: %d", code)
	}
}

// A placeholder or short admin token stops the gateway from starting and a
// reload from applying, with an error naming the variable.
func TestWeakAdminTokenRefused(t *testing.T) {
	cfg := testConfig(testenv.GPUSim(t, nil))
	for _, tok := range []string{"change-me", "replace-me", "Change_Me", "changeme", "admin", "secret", "password", "abc123", "0123456789abcde",
		"please-change-me-before-production"} {
		t.Setenv("FRONTDOOR_ADMIN_TOKEN", tok)
		_, err := New(cfg, Deps{Logger: NewLogger(cfg.Logging, io.Discard)})
		if err == nil || !strings.Contains(err.Error(), "environment variable FRONTDOOR_ADMIN_TOKEN") {
			t.Errorf("token %q: New = %v", tok, err)
		}
	}
	t.Setenv("FRONTDOOR_ADMIN_TOKEN", testToken)
	gw := startGateway(t, cfg)
	t.Setenv("FRONTDOOR_ADMIN_TOKEN", "change-me")
	err := gw.Reload(cfg)
	if err == nil || !strings.Contains(err.Error(), "FRONTDOOR_ADMIN_TOKEN") {
		t.Fatalf("reload with a placeholder token: %v", err)
	}
	// The running token still works.
	if code, _ := adminDo(t, http.MethodGet, gw.URL+"/status", "", "Authorization", "Bearer "+testToken); code != 200 {
		t.Errorf("after the refused reload, the old token: %d", code)
	}
}

// The hot list holds clients' prompts: refused unless the privacy switches
// show cached questions.
func TestHotListFollowsPrivacy(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*Config)
		want int
	}{
		{"default", func(*Config) {}, 403},
		{"show_cached_questions", func(c *Config) { c.Admin.ShowCachedQuestions = true }, 200},
		{"log_prompts", func(c *Config) { c.Logging.LogPrompts = true }, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			gw, _ := cacheGateway(t, "memory", c.set)
			askStored(t, gw, cbody("What is the secret project codename?", ""))
			ask(t, gw, cbody("What is the secret project codename?", ""))
			code, b := adminDo(t, http.MethodGet, gw.URL+"/admin/cache/hot", "")
			if code != c.want || (code == 200) != strings.Contains(string(b), "secret project codename") {
				t.Fatalf("hot: %d %s", code, b)
			}
			if code == 403 && !strings.Contains(string(b), "admin.show_cached_questions") {
				t.Fatalf("the refusal does not name the switch: %s", b)
			}
		})
	}
}
