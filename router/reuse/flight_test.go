package reuse

import (
	"encoding/json"
	"testing"

	"frontdoor/adapters"
	"frontdoor/cache"
)

// TestFlightServesOnlyWhatItStores: between a stream's end and its flight's
// leave, an identical request is served the flight's answer as the exact
// hit it is about to be; an answer the write-back won't store (a tool call
// with cache_tool_calls off, a no-store request) must not be served so.
// The window is a few microseconds over HTTP
// (the router's TestToolCallStreamsCachedAndReplayed hit it once in 20
// runs); here it
// is held open.
func TestFlightServesOnlyWhatItStores(t *testing.T) {
	text := &adapters.Answer{Content: "Paris.", Finish: "stop"}
	call := &adapters.Answer{ToolCalls: json.RawMessage(`[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]`), Finish: "tool_calls"}
	keys := cache.Keys{Exact: "exact-key"}
	for _, allow := range []bool{true, false} {
		conf := cache.DefaultConfig()
		conf.Eligibility.CacheToolCalls = allow
		c0 := &Cache{conf: func() *cache.Config { return &conf }}
		for _, c := range []struct {
			name  string
			plan  *Plan
			a     *adapters.Answer
			serve bool
		}{
			{"text", &Plan{store: true, keys: keys}, text, true},
			{"tool call", &Plan{store: true, keys: keys}, call, allow},
			{"no-store", &Plan{store: false, keys: keys}, text, false},
			{"no answer", &Plan{store: true, keys: keys}, nil, false},
		} {
			f := c0.flights.newFlight(c0, c.plan, true)
			f.finish(c.a, c.a == nil)
			if served := f.Finished() != nil; served != c.serve {
				t.Errorf("cache_tool_calls %v, %s: served as a hit %v, want %v", allow, c.name, served, c.serve)
			}
			c0.flights.retire()
			registered, _ := c0.flights.join(c0, c.plan)
			registered.finish(c.a, c.a == nil)
			if _, leads := c0.flights.join(c0, c.plan); leads == c.serve {
				t.Errorf("cache_tool_calls %v, %s: a request arriving after the flight ended follows it %v, want %v", allow, c.name, !leads, c.serve)
			}
			if _, stored := c0.cacheWrite(f.entryID, c.plan, c.a); stored != c.serve {
				t.Errorf("cache_tool_calls %v, %s: written back %v, served as a hit %v: the two must agree", allow, c.name, stored, c.serve)
			}
		}
	}
}
