package router

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"frontdoor/admission"
)

// setRateLimit sets OpenAI's x-ratelimit-{limit,remaining,reset}-<kind>
// headers from the tenant's bucket q, when ok (the bucket is limited).
// kind is "requests" or "tokens". Reset is a Go duration ("1s", "6m0s"),
// as OpenAI writes it.
func setRateLimit(h *fasthttp.ResponseHeader, kind string, q admission.Quota, ok bool) {
	if !ok {
		return
	}
	h.Set("x-ratelimit-limit-"+kind, strconv.Itoa(q.Limit))
	h.Set("x-ratelimit-remaining-"+kind, strconv.Itoa(q.Remaining))
	h.Set("x-ratelimit-reset-"+kind, resetString(q.Reset))
}

// resetString writes d to the millisecond: "0s", "20ms", "1.5s", "6m0s".
func resetString(d time.Duration) string {
	if d > 0 && d < time.Millisecond {
		d = time.Millisecond
	}
	return d.Round(time.Millisecond).String()
}
