package router

import (
	"net/http"
	"testing"
)

// Once draining (SIGTERM, shutdown.drain_delay), answers are still given
// but each closes its connection, so a pooling proxy stops reusing them.
func TestDrainingClosesConnections(t *testing.T) {
	gw, _ := simAndGateway(t, 1, nil)
	ask := func() *http.Response {
		t.Helper()
		resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody("hello", `"max_tokens":2`))
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		return resp
	}
	if resp := ask(); resp.Close {
		t.Fatal("before the drain an answer closed its connection")
	}
	gw.BeginDrain()
	if resp := ask(); !resp.Close { // Connection: close (net/http takes the header out)
		t.Error("while draining an answer kept its connection open")
	}
}
