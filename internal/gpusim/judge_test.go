package gpusim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// labelFile is a small synthetic label file: a header, CRLF and padded
// fields, malformed lines, a blank line, a duplicate, a conflict and a
// pair of the same text labelled 0.
const labelFile = "\ufeffsentence1\tsentence2\tlabel\n" +
	"How do I reset my password?\tHow can I change my password?\t1\n" +
	"  What is the capital of France?  \t  Which city is France's capital?\t 1 \r\n" +
	"Alice gave Bob the book.\tBob gave Alice the book.\t0\n" +
	"\n" +
	"only two fields\t1\n" +
	"four\tfields\there\t1\n" +
	"bad label\tother text\t2\n" +
	"   \tempty first text\t0\n" +
	"Is it raining?\tWill it rain?\t1\n" +
	"Will it rain?\tIs it raining?\t0\n" +
	"How do I reset my password?\tHow can I change my password?\t1\n" +
	"Same words here.\tSame words here.\t0\n"

func writeLabels(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "labels.tsv")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func loadLabels(t *testing.T, content string) *JudgeLabels {
	t.Helper()
	l, err := LoadJudgeLabels(writeLabels(t, content))
	if err != nil {
		t.Fatalf("LoadJudgeLabels: %v", err)
	}
	return l
}

func TestReadJudgeLabels(t *testing.T) {
	l := loadLabels(t, labelFile)
	want := JudgeLabelsStats{Lines: 13, Header: true, Malformed: 4, FirstMalformed: 6,
		Pairs: 5, Same: 2, Different: 1, Conflicting: 1, Identical: 1}
	if got := l.Stats(); got != want {
		t.Errorf("Stats\n got %+v\nwant %+v", got, want)
	}
	for _, tc := range []struct{ cached, asked, want string }{
		{"How do I reset my password?", "How can I change my password?", JudgeYes},
		{"How can I change my password?", "How do I reset my password?", JudgeYes},
		{"What is the capital of France?", "Which city is France's capital?", JudgeYes}, // padded, CRLF
		{" Which city is France's capital?\n", "What is the capital of France?", JudgeYes},
		{"Alice gave Bob the book.", "Bob gave Alice the book.", JudgeNo},
		{"Bob gave Alice the book.", "Alice gave Bob the book.", JudgeNo},
		{"Is it raining?", "Will it rain?", JudgeUnsure}, // labelled both ways
		{"Same words here.", "Same words here.", JudgeYes},
		{"never seen", " never seen ", JudgeYes}, // identical after trimming
		{"never seen", "not in the file", JudgeUnsure},
		{"how do i reset my password?", "How can I change my password?", JudgeUnsure}, // case matters
		{"sentence1", "sentence2", JudgeUnsure},                                       // the header is no pair
		{"bad label", "other text", JudgeUnsure},
	} {
		if got := l.Verdict(tc.cached, tc.asked); got != tc.want {
			t.Errorf("Verdict(%q, %q) = %q, want %q", tc.cached, tc.asked, got, tc.want)
		}
	}

	// No header: the first line is a pair.
	l, err := ReadJudgeLabels(strings.NewReader("a\tb\t1\nc\td\t0"))
	if err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Header || st.Pairs != 2 || st.Lines != 2 || l.Verdict("b", "a") != JudgeYes || l.Verdict("c", "d") != JudgeNo {
		t.Errorf("headerless file: %+v", st)
	}
	// A malformed first line is not a header.
	l, err = ReadJudgeLabels(strings.NewReader("just one field\na\tb\t1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Header || st.Malformed != 1 || st.FirstMalformed != 1 || st.Pairs != 1 {
		t.Errorf("malformed first line: %+v", st)
	}

	for name, content := range map[string]string{
		"empty":         "",
		"header only":   "s1\ts2\tlabel\n",
		"all malformed": "a\tb\nc\td\tx\te\n",
		"json":          `[{"origin":"a","similar":"b"}]`,
		"line too long": "a\t" + strings.Repeat("b", maxLabelLine) + "\t1\n",
	} {
		if _, err := ReadJudgeLabels(strings.NewReader(content)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := LoadJudgeLabels(filepath.Join(t.TempDir(), "missing.tsv")); err == nil || !strings.Contains(err.Error(), "missing.tsv") {
		t.Errorf("missing file: %v", err)
	}
}

// judgeBody is a judge request as frontdoor sends it: an instruction and one
// user message holding {"cached_question": ..., "new_question": ...}.
func judgeBody(t *testing.T, cached, asked, extra string) string {
	t.Helper()
	content, err := json.Marshal(map[string]string{"cached_question": cached, "new_question": asked})
	if err != nil {
		t.Fatal(err)
	}
	return chatBody(t, string(content), extra)
}

// chatBody is a chat with the judge's system prompt and one user message.
func chatBody(t *testing.T, user, extra string) string {
	t.Helper()
	msgs, err := json.Marshal([]map[string]string{
		{"role": "system", "content": "Answer yes if the cached answer serves the new question, else no."},
		{"role": "user", "content": user},
	})
	if err != nil {
		t.Fatal(err)
	}
	return `{"model":"qwen3-8b",` + extra + `"messages":` + string(msgs) + `}`
}

func TestJudgeRequests(t *testing.T) {
	labels := loadLabels(t, labelFile)
	// An ITL of an hour: a judge answer is one token, so it never waits one
	// (ordinary chats here ask for max_tokens 1).
	s := startServer(t, func(c *Config) { c.JudgeLabels = labels; c.ITL = time.Hour })
	c := newClient(t)
	url := s.URL() + "/v1/chat/completions"

	answer := func(body string) completion {
		t.Helper()
		r := post(t, c, url, body)
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		return decode[completion](t, r.body)
	}
	const (
		pw1, pw2 = "How do I reset my password?", "How can I change my password?"
		ab, ba   = "Alice gave Bob the book.", "Bob gave Alice the book."
	)
	for _, tc := range []struct{ cached, asked, want string }{
		{pw1, pw2, JudgeYes},
		{pw2, pw1, JudgeYes},
		{"  " + pw1, pw2 + "\n", JudgeYes},
		{"Anything at all?", "Anything at all?", JudgeYes},
		{ab, ba, JudgeNo},
		{ba, ab, JudgeNo},
		{"Is it raining?", "Will it rain?", JudgeUnsure},
		{"What is love?", "What time is it?", JudgeUnsure},
		// The questions are the decoded strings: quotes are text, and a
		// question that tries to end its field is one text, not a pair.
		{`Say "yes" {}`, `Say "yes" {}`, JudgeYes},
		{"Anything at all?", `x", "new_question": "Anything at all?`, JudgeUnsure},
	} {
		body := judgeBody(t, tc.cached, tc.asked, "")
		cc := answer(body)
		if ch := cc.Choices[0]; ch.Message.Content != tc.want || ch.Message.Role != "assistant" || ch.FinishReason != "stop" {
			t.Errorf("(%q, %q): %+v, want %q", tc.cached, tc.asked, ch, tc.want)
		}
		if u := cc.Usage; u.CompletionTokens != 1 || u.PromptTokens != PromptTokens(PromptText([]byte(body))) {
			t.Errorf("(%q, %q): usage %+v", tc.cached, tc.asked, u)
		}
	}

	// Anything else is an ordinary chat, answered with the prompt's words.
	const one = `"max_tokens":1,`
	normal := []string{
		chatBody(t, "What is the capital of France?", one),
		chatBody(t, `{"cached_question": "a", "new_question": `, one),                   // not JSON
		chatBody(t, `{"cached_question": "a", "new_question": "b"} trailing`, one),      // JSON and more
		chatBody(t, `{"cached_question": "a", "new_question": "b", "extra": "c"}`, one), // another field
		chatBody(t, `{"cached_question": "a"}`, one),                                    // a field missing
		chatBody(t, `{"cached_question": "a", "cached_question": "b"}`, one),            // a field twice
		chatBody(t, `{"cached_question": "a", "new_question": 1}`, one),                 // not a string
		chatBody(t, `{"cached": "a", "new": "a"}`, one),                                 // the shape before cached_question
		chatBody(t, `["a", "b"]`, one),                                                  // not an object
		// Not a user message; not the last message; not a string content.
		`{"max_tokens":1,"messages":[{"role":"system","content":"{\"cached_question\":\"a\",\"new_question\":\"a\"}"}]}`,
		`{"max_tokens":1,"messages":[{"role":"user","content":"{\"cached_question\":\"a\",\"new_question\":\"a\"}"},{"role":"assistant","content":"yes"}]}`,
		`{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"{\"cached_question\":\"a\",\"new_question\":\"a\"}"}]}]}`,
	}
	for _, body := range normal {
		cc := answer(body)
		if got, want := cc.Choices[0].Message.Content, ExpectedText(PromptText([]byte(body)), 1); got != want {
			t.Errorf("%s: content %q, want %q", body, got, want)
		}
	}
	r := post(t, c, s.URL()+"/v1/completions", `{"max_tokens":1,"prompt":"{\"cached_question\":\"a\",\"new_question\":\"a\"}"}`)
	if cc := decode[completion](t, r.body); r.status != 200 || cc.Choices[0].Text != ExpectedText(`{"cached_question":"a","new_question":"a"}`, 1) {
		t.Errorf("completions with a judge-shaped prompt: %s", r.body)
	}

	st := s.Stats()
	if st.JudgeYes != 5 || st.JudgeNo != 2 || st.JudgeUnsure != 3 || st.Completed != 10+int64(len(normal))+1 {
		t.Errorf("Stats %+v", st)
	}
	metrics := doReq(t, c, "GET", s.URL()+"/metrics", "", nil).body
	for _, line := range []string{
		"# TYPE gpusim_judge_answers_total counter",
		`gpusim_judge_answers_total{model_name="qwen3-8b",verdict="yes"} 5`,
		`gpusim_judge_answers_total{model_name="qwen3-8b",verdict="no"} 2`,
		`gpusim_judge_answers_total{model_name="qwen3-8b",verdict="unsure"} 3`,
	} {
		if !bytes.Contains(metrics, []byte(line+"\n")) {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	if _, types := scrape(t, c, s); types["gpusim_judge_answers_total"] != "COUNTER" || types["vllm:num_requests_running"] != "GAUGE" {
		t.Errorf("metric types %v", types)
	}
}

func TestJudgeStream(t *testing.T) {
	labels := loadLabels(t, labelFile)
	s := startServer(t, func(c *Config) { c.JudgeLabels = labels; c.OutputTokens = 8 })
	c := newClient(t)
	url := s.URL() + "/v1/chat/completions"

	body := judgeBody(t, "Alice gave Bob the book.", "Bob gave Alice the book.", `"stream":true,"stream_options":{"include_usage":true},`)
	res := readStream(t, c, url, body)
	if res.text != JudgeNo || res.finish != "stop" || !res.done || !res.roleFst {
		t.Errorf("judge stream: text %q finish %q done %v role %v", res.text, res.finish, res.done, res.roleFst)
	}
	// 1 role + 1 token + 1 finish + 1 usage.
	if len(res.chunks) != 4 || res.usage == nil || res.usage.CompletionTokens != 1 ||
		res.usage.PromptTokens != PromptTokens(PromptText([]byte(body))) {
		t.Errorf("judge stream: %d chunks, usage %+v", len(res.chunks), res.usage)
	}
	res = readStream(t, c, url, judgeBody(t, "x", "y", `"stream":true,`))
	if res.text != JudgeUnsure || res.usage != nil || len(res.chunks) != 3 {
		t.Errorf("judge stream without usage: %+v", res)
	}
	// An ordinary stream is unchanged.
	body = chatBody(t, "tell me more", `"stream":true,`)
	if res = readStream(t, c, url, body); res.text != ExpectedText(PromptText([]byte(body)), 8) {
		t.Errorf("ordinary stream %q", res.text)
	}
	if st := s.Stats(); st.JudgeNo != 1 || st.JudgeUnsure != 1 || st.JudgeYes != 0 || st.Completed != 3 {
		t.Errorf("Stats %+v", st)
	}
}

// TestJudgeOff checks that without JudgeLabels a judge request is an
// ordinary chat and no judge metric is exposed.
func TestJudgeOff(t *testing.T) {
	s := startServer(t, func(c *Config) { c.OutputTokens = 5 })
	c := newClient(t)
	body := judgeBody(t, "a", "a", "")
	r := post(t, c, s.URL()+"/v1/chat/completions", body)
	if cc := decode[completion](t, r.body); cc.Choices[0].Message.Content != ExpectedText(PromptText([]byte(body)), 5) {
		t.Errorf("judge request without labels: %s", r.body)
	}
	metrics := doReq(t, c, "GET", s.URL()+"/metrics", "", nil).body
	sc := bufio.NewScanner(bytes.NewReader(metrics))
	for sc.Scan() {
		if strings.Contains(sc.Text(), "judge") {
			t.Errorf("/metrics without labels: %q", sc.Text())
		}
	}
	if st := s.Stats(); st.JudgeYes+st.JudgeNo+st.JudgeUnsure != 0 {
		t.Errorf("Stats %+v", st)
	}
}
