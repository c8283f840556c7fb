package warm

import (
	"encoding/json"
	"strings"
	"testing"
)

func reqOf(t *testing.T, it Item) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(it.Request, &m); err != nil {
		t.Fatalf("%s:%d: request %s: %v", it.File, it.Line, it.Request, err)
	}
	return m
}

func TestParseText(t *testing.T) {
	temp := 0.2
	data := "\xef\xbb\xbf# hot prompts\n\nWhat is the refund policy?\n  如何重置密码？  \n#skip\n"
	items, f, err := Parse("hot.txt", []byte(data), Defaults{Model: "qwen3-8b", System: "Be brief.", Temperature: &temp, MaxTokens: 64})
	if err != nil || f != FormatText || len(items) != 2 {
		t.Fatalf("Parse = %d items, %s, %v", len(items), f, err)
	}
	if items[0].Line != 3 || items[1].Line != 4 {
		t.Fatalf("lines %d, %d; want 3, 4", items[0].Line, items[1].Line)
	}
	m := reqOf(t, items[1])
	msgs := m["messages"].([]any)
	if m["model"] != "qwen3-8b" || m["temperature"] != 0.2 || m["max_tokens"] != 64.0 || len(msgs) != 2 ||
		msgs[0].(map[string]any)["content"] != "Be brief." || msgs[1].(map[string]any)["content"] != "如何重置密码？" {
		t.Fatalf("request = %v", m)
	}
	if _, _, err := Parse("hot.txt", []byte("a prompt\n"), Defaults{}); err == nil {
		t.Fatal("plain text without --model parsed")
	}
}

func TestParseJSONL(t *testing.T) {
	data := strings.Join([]string{
		`# chat requests, wrapped requests and answered pairs`,
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		`{"tenant":"acme","request":{"messages":[{"role":"user","content":"hello"}]}}`,
		`{"prompt":"退货政策是什么？","system":"客服","answer":"30 天内可退。","params":{"temperature":0}}`,
		`{"messages":[{"role":"user","content":"q"}],"model":"m2","answer":"a","tenant":"t1"}`,
		`{"model":"m", "messages": [`,
		`{"answer":"no question"}`,
		`{"request":[1]}`,
		`[1,2]`,
		`{"messages":[{"role":"user","content":"no model"}]}`,
	}, "\n")
	items, f, err := Parse("faq.jsonl", []byte(data), Defaults{Model: "dflt"})
	if err != nil || f != FormatJSONL || len(items) != 9 {
		t.Fatalf("Parse = %d items, %s, %v", len(items), f, err)
	}
	if m := reqOf(t, items[0]); m["stream"] != nil || m["model"] != "m" {
		t.Fatalf("stream kept or model lost: %v", m)
	}
	if it := items[1]; it.Tenant != "acme" || reqOf(t, it)["model"] != "dflt" {
		t.Fatalf("wrapped: %+v", it)
	}
	p := items[2]
	if p.Kind != KindPair || p.Answer != "30 天内可退。" || p.Err != nil {
		t.Fatalf("pair: %+v", p)
	}
	m := reqOf(t, p)
	msgs := m["messages"].([]any)
	if m["temperature"] != 0.0 || m["model"] != "dflt" || len(msgs) != 2 || msgs[0].(map[string]any)["role"] != "system" {
		t.Fatalf("pair request = %v", m)
	}
	if it := items[3]; it.Tenant != "t1" || reqOf(t, it)["model"] != "m2" {
		t.Fatalf("pair with messages: %+v", it)
	}
	for i, line := range []int{6, 7, 8, 9} {
		it := items[4+i]
		if it.Err == nil || it.Line != line || !strings.HasPrefix(it.Err.Error(), "faq.jsonl:"+itoa(line)+": ") {
			t.Fatalf("item %d: line %d err %v; want an error naming faq.jsonl:%d", 4+i, it.Line, it.Err, line)
		}
	}
	// Without a default model, a request without one is malformed.
	items, _, _ = Parse("x.jsonl", []byte(`{"messages":[{"role":"user","content":"no model"}]}`), Defaults{})
	if items[0].Err == nil {
		t.Fatal("a request without a model parsed")
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func FuzzParse(f *testing.F) {
	f.Add([]byte("What is frontdoor?\n# c\n\n退货政策\n"))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}` + "\n" + `{"prompt":"p","answer":"a"}`))
	f.Add([]byte(`{"tenant":1,"request":{"messages":[]}}` + "\n{\n\xff\xfe"))
	f.Add([]byte(`{"messages":[{"role":"user","content":"q"}],"answer":"a","params":{"model":"x","stream":true}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		items, _, err := Parse("f", data, Defaults{Model: "m"})
		if err != nil {
			return
		}
		for _, it := range items {
			if it.Line < 1 {
				t.Fatalf("line %d", it.Line)
			}
			if it.Err != nil {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal(it.Request, &m); err != nil {
				t.Fatalf("line %d: request is not a JSON object: %v", it.Line, err)
			}
			if _, ok := m["stream"]; ok {
				t.Fatalf("line %d: stream kept", it.Line)
			}
			if s, ok := m["model"].(string); !ok || s == "" {
				t.Fatalf("line %d: no model: %s", it.Line, it.Request)
			}
			if msgs, ok := m["messages"].([]any); !ok || len(msgs) == 0 {
				t.Fatalf("line %d: no messages: %s", it.Line, it.Request)
			}
			if it.Kind == KindPair && it.Answer == "" {
				t.Fatalf("line %d: pair without an answer", it.Line)
			}
		}
	})
}
