package router

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"frontdoor/internal/testenv"
)

// After a login, next sends the browser only to a path of this gateway:
// whatever a browser could read as another origin (a tab or newline it
// drops, a backslash it reads as a slash, "//", a scheme, "@", a second
// encoding) sends it to /dashboard instead, from the query and from the
// form alike, and the login form does not carry it.
func TestLoginNextStaysOnTheGateway(t *testing.T) {
	gw := tokenGateway(t)
	post := func(rawQuery, formNext string) *http.Response {
		t.Helper()
		form := url.Values{"token": {testToken}}
		if formNext != "" {
			form.Set("next", formNext)
		}
		u := gw.URL + "/admin/login"
		if rawQuery != "" {
			u += "?" + rawQuery
		}
		r := doReq(t, http.MethodPost, u, form.Encode(), "Content-Type", "application/x-www-form-urlencoded")
		if r.StatusCode != 303 || len(r.Cookies()) != 1 {
			t.Fatalf("login with ?%s and form next %q: %d %v", rawQuery, formNext, r.StatusCode, r.Header)
		}
		return r
	}
	// As sent in the query (raw, percent-encoded as an attacker's link has it).
	for _, q := range []string{
		"next=/%09/evil.example", "next=/%0a/evil.example", "next=/%0d/evil.example", "next=%09//evil.example",
		"next=//evil.example", "next=/%5Cevil.example", "next=/%5C/evil.example", "next=%5C%5Cevil.example",
		"next=https://evil.example", "next=https:evil.example", "next=/%2F/evil.example", "next=%2F%2Fevil",
		"next=/dashboard%0d%0aSet-Cookie:x", "next=/dashboard@evil.example", "next=/@evil.example",
		"next=/%252F%252Fevil.example", "next=/dashboard%23x", "next=/dashboard%00", "next=/dashboard/%E2%80%AE",
		"next=dashboard", "next=", "next=/" + strings.Repeat("a", 300), "next=/a//evil.example",
	} {
		if loc := post(q, "").Header.Get("Location"); loc != "/dashboard" {
			t.Errorf("login with ?%s redirects to %q", q, loc)
		}
	}
	// As the form's hidden field carries it (the form wins over the query).
	for _, next := range []string{"/\t/evil.example", "//evil.example", `/\evil.example`, "https://evil.example",
		"/dashboard\r\nSet-Cookie: x=1", "/dashboard@evil.example", "javascript:alert(1)"} {
		if loc := post("next=/status", next).Header.Get("Location"); loc != "/dashboard" {
			t.Errorf("login with form next %q redirects to %q", next, loc)
		}
	}
	// A path of the gateway passes, from the query or the form.
	if loc := post("next=/dashboard", "").Header.Get("Location"); loc != "/dashboard" {
		t.Errorf("next=/dashboard: %q", loc)
	}
	if loc := post("next=/status", "").Header.Get("Location"); loc != "/status" {
		t.Errorf("next=/status: %q", loc)
	}
	if loc := post("", "/admin/cache/hot?n=10&x=1").Header.Get("Location"); loc != "/admin/cache/hot?n=10&x=1" {
		t.Errorf("form next /admin/cache/hot?n=10&x=1: %q", loc)
	}
	// The form shown for a bad next carries /dashboard, not the bad one.
	code, b := adminDo(t, http.MethodGet, gw.URL+"/admin/login?next=/%09/evil.example", "")
	if code != 200 || !strings.Contains(string(b), `name="next" value="/dashboard"`) || strings.Contains(string(b), "evil.example") {
		t.Errorf("GET /admin/login?next=/%%09/evil.example: %d %s", code, b)
	}
}

// A reload that names a weak admin token is refused like any invalid
// config: the running config and token stay, the refusal is logged at
// ERROR with the fix, answered to the caller and counted.
func TestReloadRefusesWeakAdminToken(t *testing.T) {
	t.Setenv("FD_GOOD_ADMIN", testToken)
	t.Setenv("FD_WEAK_ADMIN", "aaaaaaaaaaaaaaaa")
	sim := testenv.GPUSim(t, nil)
	path := filepath.Join(t.TempDir(), "frontdoor.yaml")
	write := func(tokenEnv string) {
		t.Helper()
		body := "listen: 127.0.0.1:0\ncache: {backend: off}\nadmin: {token_env: " + tokenEnv + ", allow_cidrs: []}\n" +
			"nodes:\n  - {name: gpu-a, url: " + sim.URL() + ", models: [qwen3-8b]}\n"
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("FD_GOOD_ADMIN")
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	gw := startGatewayWith(t, cfg, Deps{ConfigPath: path})
	write("FD_WEAK_ADMIN")
	code, b := adminDo(t, http.MethodPost, gw.URL+"/admin/reload", "", "Authorization", "Bearer "+testToken)
	if code == 200 || !strings.Contains(string(b), "FD_WEAK_ADMIN") || !strings.Contains(string(b), "openssl rand -hex 32") {
		t.Fatalf("reload to a weak token: %d %s", code, b)
	}
	if got := gw.Config().Admin.TokenEnv; got != "FD_GOOD_ADMIN" {
		t.Fatalf("after the refused reload admin.token_env is %q", got)
	}
	if code, _ := adminDo(t, http.MethodGet, gw.URL+"/status", "", "Authorization", "Bearer "+testToken); code != 200 {
		t.Errorf("after the refused reload, the old token: %d", code)
	}
	if code, _ := adminDo(t, http.MethodGet, gw.URL+"/status", "", "Authorization", "Bearer aaaaaaaaaaaaaaaa"); code != 403 {
		t.Errorf("after the refused reload, the weak token: %d", code)
	}
	logs := gw.Logs.String()
	if !strings.Contains(logs, "config reload refused") || !strings.Contains(logs, "FD_WEAK_ADMIN") || strings.Contains(logs, "aaaaaaaaaaaaaaaa") {
		t.Errorf("the refusal is not logged with the variable, or the token is: %s", logs)
	}
	_, m := adminDo(t, http.MethodGet, gw.URL+"/metrics", "")
	if !strings.Contains(string(m), `frontdoor_config_reloads_total{result="refused"} 1`) {
		t.Errorf("the refused reload is not counted")
	}
}
