package router

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"frontdoor/internal/testenv"
)

// TestAccessLogLines checks the access log as an operator reads it: one
// JSON object a line, slog's keys in slog's order, values that survive
// quotes, backslashes and Unicode in what the client sent, and no line when
// the level is above info.
func TestAccessLogLines(t *testing.T) {
	s := testenv.GPUSim(t, nil)
	cfg := testConfig(s)
	cfg.Logging.AccessLog = true
	gw := startGateway(t, cfg)

	tricky := `req"quoted\slash`
	if resp, b := post(t, gw.URL+"/v1/chat/completions", chatBody("hi", ""), "X-Request-Id", tricky); resp.StatusCode != 200 {
		t.Fatalf("chat: %d %s", resp.StatusCode, b)
	}
	unknown := strings.Replace(chatBody("hi", ""), `"qwen3-8b"`, `"m\u00e9\"t\\a\n"`, 1)
	if resp, b := post(t, gw.URL+"/v1/chat/completions", unknown, "X-Request-Id", "r2"); resp.StatusCode != 404 {
		t.Fatalf("unknown model: %d %s", resp.StatusCode, b)
	}
	lines := accessLines(t, gw.Logs.String())
	if len(lines) != 2 {
		t.Fatalf("want 2 access lines, got %d:\n%s", len(lines), gw.Logs.String())
	}
	wantKeys := []string{"time", "level", "msg", "request_id", "path", "status", "model", "stream", "upstream", "attempts", "cache", "duration_ms"}
	for _, l := range lines {
		if got := strings.Join(l.keys, ","); got != strings.Join(wantKeys, ",") {
			t.Fatalf("keys %s, want %s", got, strings.Join(wantKeys, ","))
		}
		if _, err := time.Parse(time.RFC3339Nano, l.fields["time"].(string)); err != nil {
			t.Fatalf("time: %v", err)
		}
		if l.fields["level"] != "INFO" || l.fields["path"] != "/v1/chat/completions" {
			t.Fatalf("line %v", l.fields)
		}
		if d, ok := l.fields["duration_ms"].(float64); !ok || d <= 0 {
			t.Fatalf("duration_ms %v", l.fields["duration_ms"])
		}
	}
	ok, bad := lines[0].fields, lines[1].fields
	if ok["request_id"] != tricky || ok["status"] != 200.0 || ok["model"] != "qwen3-8b" || ok["stream"] != false ||
		ok["upstream"] != "gpu-a" || ok["attempts"] != 1.0 {
		t.Fatalf("answered line: %v", ok)
	}
	if bad["request_id"] != "r2" || bad["status"] != 404.0 || bad["model"] != "m\u00e9\"t\\a\n" || bad["upstream"] != "" || bad["attempts"] != 0.0 {
		t.Fatalf("refused line: %v", bad)
	}

	// Text format goes through slog; warn level drops access lines.
	cfg.Logging.Format = "text"
	text := startGateway(t, cfg)
	post(t, text.URL+"/v1/chat/completions", chatBody("hi", ""), "X-Request-Id", "t1")
	if out := text.Logs.String(); !strings.Contains(out, "msg=request request_id=t1 path=/v1/chat/completions status=200") {
		t.Fatalf("text access line missing:\n%s", out)
	}
	cfg.Logging.Format, cfg.Logging.Level = "json", "warn"
	quiet := startGateway(t, cfg)
	post(t, quiet.URL+"/v1/chat/completions", chatBody("hi", ""))
	if out := quiet.Logs.String(); strings.Contains(out, `"msg":"request"`) {
		t.Fatalf("an access line at level warn:\n%s", out)
	}
}

type logLine struct {
	keys   []string
	fields map[string]any
}

// accessLines decodes the access lines of a JSON log, keeping key order.
func accessLines(t *testing.T, logs string) []logLine {
	t.Helper()
	var out []logLine
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		if !strings.Contains(sc.Text(), `"msg":"request"`) {
			continue
		}
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l.fields); err != nil {
			t.Fatalf("not JSON: %v: %s", err, sc.Text())
		}
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		_, _ = dec.Token() // {
		for dec.More() {
			k, _ := dec.Token()
			l.keys = append(l.keys, k.(string))
			var v any
			if err := dec.Decode(&v); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, l)
	}
	return out
}
