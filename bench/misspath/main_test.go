package main

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestWrkScriptBody checks that the Lua script sends what the preload
// sends, but for the number: the same scope, so the load searches the
// preloaded entries.
func TestWrkScriptBody(t *testing.T) {
	parts := regexp.MustCompile(`wrk\.format\(nil, nil, nil, (".*") \.\. string\.format\("%d", n\) \.\. (".*")\)`)
	for _, stream := range []bool{false, true} {
		script := wrkScript(stream)
		m := parts.FindStringSubmatch(script)
		if m == nil {
			t.Fatalf("stream=%v: no body template in the script:\n%s", stream, script)
		}
		var pieces [2]string
		for i, q := range m[1:] {
			// Lua reads \" and \\ as Go does; other escapes could differ.
			if rest := strings.NewReplacer(`\"`, "", `\\`, "").Replace(q[1 : len(q)-1]); strings.Contains(rest, `\`) {
				t.Errorf("stream=%v: escape Lua may read otherwise in %s", stream, q)
			}
			var err error
			if pieces[i], err = strconv.Unquote(q); err != nil {
				t.Fatal(err)
			}
		}
		got := pieces[0] + "20000042" + pieces[1]
		if want := string(body(prompt(20000042), stream)); got != want {
			t.Errorf("stream=%v: the script sends\n%s\nwant\n%s", stream, got, want)
		}
		var req struct {
			Stream   bool
			Messages []struct{ Role, Content string }
		}
		if err := json.Unmarshal([]byte(got), &req); err != nil {
			t.Fatalf("stream=%v: %v", stream, err)
		}
		if req.Stream != stream || len(req.Messages) != 2 || req.Messages[1].Content != prompt(20000042) {
			t.Errorf("stream=%v: request %+v", stream, req)
		}
	}
}
