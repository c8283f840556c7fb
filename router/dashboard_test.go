package router

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"frontdoor/router/admin"
)

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func doReq(t *testing.T, method, u, body string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// login posts the token as the login form does and returns the answer.
func login(t *testing.T, base, token string, headers ...string) *http.Response {
	t.Helper()
	form := url.Values{"token": {token}, "next": {"/dashboard"}}.Encode()
	return doReq(t, http.MethodPost, base+"/admin/login", form,
		append([]string{"Content-Type", "application/x-www-form-urlencoded"}, headers...)...)
}

// A browser opens the dashboard on the main listener by signing in: the
// wrong token is refused, the right one sets a signed, expiring HttpOnly
// SameSite=Strict cookie (never the token) that passes the guard; a
// forged, expired or foreign cookie does not; a state-changing request
// with the cookie needs its own Origin.
func TestDashboardLogin(t *testing.T) {
	gw := tokenGateway(t)

	// Without credentials a browser is sent to the login page; a tool gets the 403.
	if r := doReq(t, http.MethodGet, gw.URL+"/dashboard", "", "Accept", "text/html"); r.StatusCode != 303 || r.Header.Get("Location") != "/admin/login?next=/dashboard" {
		t.Fatalf("GET /dashboard from a browser without a session: %d %q", r.StatusCode, r.Header.Get("Location"))
	}
	if code, b := adminDo(t, http.MethodGet, gw.URL+"/admin/login", ""); code != 200 || !strings.Contains(string(b), `name="token"`) {
		t.Fatalf("GET /admin/login: %d %.200s", code, b)
	}
	for _, tok := range []string{"", testToken + "x", strings.ToUpper(testToken), testToken[:10]} {
		if r := login(t, gw.URL, tok); r.StatusCode != 403 || len(r.Cookies()) != 0 {
			t.Fatalf("login with %q: %d, cookies %v", tok, r.StatusCode, r.Cookies())
		}
	}
	r := login(t, gw.URL, testToken)
	if r.StatusCode != 303 || r.Header.Get("Location") != "/dashboard" || len(r.Cookies()) != 1 {
		t.Fatalf("login with the token: %d %q %v", r.StatusCode, r.Header.Get("Location"), r.Header.Values("Set-Cookie"))
	}
	c := r.Cookies()[0]
	raw := r.Header.Get("Set-Cookie")
	if c.Name != "frontdoor_admin" || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Secure || c.Path != "/" ||
		c.MaxAge <= 0 || strings.Contains(raw, testToken) {
		t.Fatalf("session cookie: %s", raw)
	}
	cookie := "frontdoor_admin=" + c.Value
	for _, p := range adminPaths {
		if code, b := adminDo(t, http.MethodGet, gw.URL+p, "", "Cookie", cookie); code != 200 {
			t.Errorf("GET %s with the session: %d %.200s", p, code, b)
		}
	}
	// A state-changing request with the cookie: its own Origin passes (the
	// reload answers 409: no config file), another origin, a same-site
	// fetch or no Origin at all does not.
	if code, b := adminDo(t, http.MethodPost, gw.URL+"/admin/reload", "", "Cookie", cookie, "Origin", gw.URL); code != 409 {
		t.Errorf("POST /admin/reload with the session and its own Origin: %d %s", code, b)
	}
	for _, h := range [][]string{{}, {"Origin", "http://evil.example"}, {"Origin", gw.URL, "Sec-Fetch-Site", "same-site"}, {"Sec-Fetch-Site", "cross-site"}} {
		if code, b := adminDo(t, http.MethodPost, gw.URL+"/admin/reload", "", append([]string{"Cookie", cookie}, h...)...); code != 403 {
			t.Errorf("POST /admin/reload with the session and %q: %d %s", h, code, b)
		}
	}
	// Forged, expired, foreign: refused as no credentials at all.
	t.Setenv("OTHER_TOKEN", "43234acef4c0f0307a63afc420e1a498bad34c95b71636e052fdcf65aa5d180a")
	other, err := admin.NewGuard("OTHER_TOKEN", nil)
	if err != nil {
		t.Fatal(err)
	}
	same, err := admin.NewGuard("FRONTDOOR_ADMIN_TOKEN", nil)
	if err != nil {
		t.Fatal(err)
	}
	flip := []byte(c.Value)
	flip[len(flip)-1] ^= 1
	exp, _, _ := strings.Cut(c.Value, ".")
	for what, v := range map[string]string{
		"a flipped MAC":      string(flip),
		"a later expiry":     fmt.Sprint(time.Now().Add(48*time.Hour).Unix()) + strings.TrimPrefix(c.Value, exp),
		"an expired session": same.NewSession(time.Now().Add(-time.Second)),
		"another token's":    other.NewSession(time.Now().Add(time.Hour)),
		"the token itself":   testToken,
		"empty":              "",
	} {
		if code, b := adminDo(t, http.MethodGet, gw.URL+"/status", "", "Cookie", "frontdoor_admin="+v); code != 403 || !strings.Contains(string(b), "admin_forbidden") {
			t.Errorf("GET /status with %s cookie: %d %s", what, code, b)
		}
	}
	if code, _ := adminDo(t, http.MethodGet, gw.URL+"/status", "", "Cookie", "frontdoor_admin="+same.NewSession(time.Now().Add(time.Minute))); code != 200 {
		t.Errorf("a fresh session the same token signed: %d", code)
	}
	// Over TLS (a proxy in front says so) the cookie is Secure, __Host-.
	r = login(t, gw.URL, testToken, "X-Forwarded-Proto", "https")
	if cs := r.Cookies(); len(cs) != 1 || cs[0].Name != "__Host-frontdoor_admin" || !cs[0].Secure {
		t.Fatalf("login over TLS: %v", r.Header.Values("Set-Cookie"))
	}
	// A login posted by another site's page is refused.
	if r := login(t, gw.URL, testToken, "Origin", "http://evil.example"); r.StatusCode != 403 || len(r.Cookies()) != 0 {
		t.Fatalf("cross-origin login: %d %v", r.StatusCode, r.Cookies())
	}
	// Sign out clears the cookie.
	r = doReq(t, http.MethodPost, gw.URL+"/admin/logout", "", "Cookie", cookie, "Origin", gw.URL)
	if r.StatusCode != 303 || !strings.Contains(strings.Join(r.Header.Values("Set-Cookie"), "\n"), "frontdoor_admin=;") {
		t.Fatalf("logout: %d %v", r.StatusCode, r.Header.Values("Set-Cookie"))
	}
	if strings.Contains(gw.Logs.String(), testToken) {
		t.Fatal("the admin token is in the logs")
	}
}

// Wrong tokens at /admin/login are throttled: after 10 (the burst) every
// login waits with a 429 and Retry-After, the right token included, and
// the wrong ones are logged once, not once each.
func TestAdminLoginThrottled(t *testing.T) {
	gw := tokenGateway(t)
	for i := range 10 {
		if r := login(t, gw.URL, fmt.Sprintf("wrong-%d", i)); r.StatusCode != 403 {
			t.Fatalf("wrong token %d: %d, want 403", i, r.StatusCode)
		}
	}
	for _, tok := range []string{"wrong-again", testToken} {
		r := login(t, gw.URL, tok)
		if r.StatusCode != 429 || r.Header.Get("Retry-After") == "" || len(r.Cookies()) != 0 {
			t.Fatalf("login with %q after 10 wrong tokens: %d, Retry-After %q, cookies %v", tok, r.StatusCode, r.Header.Get("Retry-After"), r.Cookies())
		}
	}
	if n := strings.Count(gw.Logs.String(), "admin login refused: wrong token"); n != 1 {
		t.Fatalf("%d WARN lines for 10 wrong tokens in a second, want 1", n)
	}
	// The bearer token still opens every admin endpoint: only logins wait.
	if code, _ := adminDo(t, http.MethodGet, gw.URL+"/status", "", "Authorization", "Bearer "+testToken); code != 200 {
		t.Fatalf("GET /status with the bearer token during the throttle: %d", code)
	}
}

// history is GET /admin/dashboard/history.
type history struct {
	Step       float64               `json:"step_seconds"`
	T          []int64               `json:"t"`
	Series     map[string][]*float64 `json:"series"`
	Throughput *float64              `json:"throughput"`
	Price      admin.Price           `json:"price"`
	Tenants    []admin.TenantRow     `json:"tenants"`
}

func (h history) max(name string) float64 {
	m := 0.0
	for _, v := range h.Series[name] {
		if v != nil {
			m = max(m, *v)
		}
	}
	return m
}

// The gateway keeps the dashboard's history itself: under traffic, the
// points of the last steps hold the request rates, hits, spill-over and
// its cost at the configured price, GPU time saved, and per-tenant rows.
func TestDashboardHistory(t *testing.T) {
	gw := opsGateway(t, func(c *Config) {
		c.Balancer.Policy = "least_inflight"
		c.Spillover.Price = SpillPrice{InputPerMillion: 1000, OutputPerMillion: 4000, Currency: "CNY"}
	})
	deadline := time.Now().Add(30 * time.Second)
	var h history
	for round := 0; ; round++ {
		trafficRound(t, gw, round)
		code, b := adminDo(t, http.MethodGet, gw.URL+"/admin/dashboard/history", "", "Authorization", "Bearer "+testToken)
		if code != 200 {
			t.Fatalf("history: %d %s", code, b)
		}
		h = history{}
		if err := json.Unmarshal(b, &h); err != nil {
			t.Fatalf("history: %v: %.300s", err, b)
		}
		if len(h.T) >= 2 && h.max("hit_rps") > 0 && h.max("spilled_rps") > 0 && h.max("rejected_rps") > 0 && h.max("hit_exact") > 0 &&
			h.max("spill_cost") > 0 && h.max("gpu_seconds_saved") > 0 && h.max("latency_p99_ms") > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the history never showed the traffic: %s", b)
		}
	}
	if h.Step != 5 || h.Price.Currency != "CNY" || h.Throughput == nil || *h.Throughput <= 0 {
		t.Fatalf("history: step %v, price %+v, throughput %v", h.Step, h.Price, h.Throughput)
	}
	for name, s := range h.Series {
		if len(s) != len(h.T) {
			t.Fatalf("series %s has %d points for %d times", name, len(s), len(h.T))
		}
	}
	rows := map[string]admin.TenantRow{}
	for _, r := range h.Tenants {
		rows[r.Name] = r
	}
	if d, l := rows[DefaultTenant], rows["limited"]; d.Requests == 0 || d.HitRate <= 0 || d.TokensSaved <= 0 || d.GPUSecondsSaved <= 0 || l.Rejected == 0 {
		t.Fatalf("tenant rows: %+v", h.Tenants)
	}
	// after= gives only the newer points.
	code, b := adminDo(t, http.MethodGet, gw.URL+fmt.Sprintf("/admin/dashboard/history?after=%d", h.T[len(h.T)-1]), "", "Authorization", "Bearer "+testToken)
	var later history
	if err := json.Unmarshal(b, &later); code != 200 || err != nil || len(later.T) > 1 {
		t.Fatalf("history?after: %d %v %d points", code, err, len(later.T))
	}
}
