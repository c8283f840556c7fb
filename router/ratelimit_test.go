package router

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"frontdoor/internal/testenv"
)

// Admitted requests carry OpenAI's x-ratelimit-* headers for the tenant's
// request bucket and, on a miss, its token bucket; a cache hit takes no
// tokens and carries only the request trio; an unlimited tenant gets none.
func TestRateLimitHeaders(t *testing.T) {
	for _, backend := range []string{"local", "redis"} {
		t.Run(backend, func(t *testing.T) {
			gw, _ := cacheGateway(t, "memory", func(c *Config) {
				c.Tenants[0].RPS, c.Tenants[0].Burst, c.Tenants[0].TokensPerMinute = 1, 5, 60000
				if backend == "redis" {
					c.Admission.Backend = "redis"
					c.Redis.URL = testenv.StartRedis(t).URL()
				}
			})
			acme := []string{"Authorization", "Bearer sk-acme-1"}
			body := chatBody("How many tokens may I use?", `"max_tokens":100`)
			xc, resp, b := ask(t, gw, body, acme...)
			if resp.StatusCode != 200 || xc != "miss" {
				t.Fatalf("first: %d %s %s", resp.StatusCode, xc, b)
			}
			req := quotaHeaders(t, resp, "requests")
			if req.limit != 5 || req.remaining != 4 || req.reset != time.Second {
				t.Fatalf("requests after one of a burst of 5 at 1 rps: %+v, want 5, 4, 1s", req)
			}
			tok := quotaHeaders(t, resp, "tokens")
			used := tok.limit - tok.remaining
			if tok.limit != 60000 || used <= 100 || used > 200 {
				t.Fatalf("tokens after a miss of max_tokens 100: %+v", tok)
			}
			// A full bucket refills used tokens at 1000/s.
			if want := time.Duration(used) * time.Millisecond; tok.reset < want || tok.reset > want+time.Millisecond {
				t.Fatalf("reset-tokens %v, want %v for %d tokens at 1000/s", tok.reset, want, used)
			}
			resp, _ = eventuallyHit(t, gw, body, "hit-exact", acme...)
			if hit := quotaHeaders(t, resp, "requests"); hit.limit != 5 || hit.remaining >= req.remaining || hit.reset <= req.reset-100*time.Millisecond {
				t.Fatalf("a hit takes from the request bucket: %+v after %+v", hit, req)
			}
			if v := resp.Header.Get("x-ratelimit-remaining-tokens"); v != "" {
				t.Fatalf("a hit takes no tokens, yet says remaining-tokens %q", v)
			}
			// The default tenant is unlimited here: no headers at all.
			_, resp, _ = ask(t, gw, chatBody("Unlimited?", ""))
			for _, h := range []string{"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests", "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"} {
				if v := resp.Header.Get(h); v != "" {
					t.Fatalf("unlimited tenant: %s: %q", h, v)
				}
			}
		})
	}
}

type quota struct {
	limit, remaining int
	reset            time.Duration
}

func quotaHeaders(t *testing.T, resp *http.Response, kind string) quota {
	t.Helper()
	var q quota
	var err error
	if q.limit, err = strconv.Atoi(resp.Header.Get("x-ratelimit-limit-" + kind)); err != nil {
		t.Fatalf("x-ratelimit-limit-%s: %v (headers %v)", kind, err, resp.Header)
	}
	if q.remaining, err = strconv.Atoi(resp.Header.Get("x-ratelimit-remaining-" + kind)); err != nil {
		t.Fatalf("x-ratelimit-remaining-%s: %v", kind, err)
	}
	if q.reset, err = time.ParseDuration(resp.Header.Get("x-ratelimit-reset-" + kind)); err != nil {
		t.Fatalf("x-ratelimit-reset-%s: %v", kind, err)
	}
	return q
}
