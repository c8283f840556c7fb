package router

import (
	"log/slog"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"frontdoor/adapters"
	"frontdoor/internal/telemetry"
)

// bodyRefusals counts and logs the request bodies refused because two
// readers could take them to mean different things (see
// adapters.ParseRequest): a duplicate key, invalid UTF-8 or a lone
// surrogate escape. Other JSON errors are only counted in
// frontdoor_requests_total.
type bodyRefusals struct {
	counts map[string]*metrics.Counter // by adapters.Code*
	log    *telemetry.RateLog
}

func newBodyRefusals(set *metrics.Set, log *slog.Logger) *bodyRefusals {
	b := &bodyRefusals{counts: map[string]*metrics.Counter{}, log: telemetry.NewRateLog(log, 10*time.Second)}
	for _, code := range []string{adapters.CodeDuplicateKey, adapters.CodeInvalidUTF8, adapters.CodeInvalidEscape} {
		b.counts[code] = set.NewCounter(`frontdoor_request_bodies_refused_total{reason="` + code + `"}`)
	}
	return b
}

// note counts e when it refused an ambiguous body.
func (b *bodyRefusals) note(x *exchange, e *adapters.APIError) {
	c := b.counts[e.Code]
	if c == nil {
		return
	}
	c.Inc()
	b.log.Warn("body:"+e.Code, "request body refused: two JSON readers could read it differently",
		"request_id", x.id, "tenant", x.tenant.name, "reason", e.Code, "error", e.Message)
}
