package telemetry

import (
	"errors"
	"testing"
	"time"

	"frontdoor/adapters"
)

type noHeaders struct{}

func (noHeaders) Peek(string) []byte { return nil }

// With tracing off (a nil Tracer, a nil Request), a request's whole observation does nothing and
// allocates nothing: the hot path pays for no span it does not send.
func TestUntracedRequestAllocatesNothing(t *testing.T) {
	var off *Tracer
	req := &adapters.Request{Model: "m", MaxTokens: 16}
	ur := &adapters.UpstreamRequest{Model: "m"}
	resp := &adapters.UpstreamResponse{Status: 200}
	route := []byte("/v1/chat/completions")
	allocs := testing.AllocsPerRun(100, func() {
		r := off.StartRequest(noHeaders{}, adapters.EndpointChat, "id", route, time.Time{})
		a := r.Admission("admission")
		a.Rejected("tenant_rps")
		a.End()
		r.Parsed(adapters.EndpointChat, req, "default")
		r.Lookup("exact").LookedUp(false)
		r.Lookup("semantic").LookedUpSemantic(false, 0.5, 0.9)
		r.Attempt(ur, "gpu-a", 1).AttemptEnded(nil, errors.ErrUnsupported, time.Time{})
		r.Spillover(ur, "spillover:x", 2).AttemptEnded(resp, nil, time.Time{})
		r.Usage(adapters.Usage{PromptTokens: 1, CompletionTokens: 2})
		r.Finished(Outcome{Status: 200, Attempts: 2, Model: "m", Cache: "miss"}, true)
		r.End()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per untraced request", allocs)
	}
	if ur.Trace != nil {
		t.Fatal("an untraced attempt sent a traceparent")
	}
	if err := off.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}
