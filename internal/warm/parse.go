// Package warm reads warm-up files and runs a warm-up: it sends each prompt
// through a gateway (or imports each answered pair) with bounded
// concurrency and rate, skipping what is already cached, and reports
// progress and failures by file and line.
package warm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Kind is what a line of a warm file asks for.
type Kind int

// Kinds of items.
const (
	KindRequest Kind = iota // a chat request, sent through the gateway
	KindPair                // an answered pair, imported with no GPU call
)

func (k Kind) String() string {
	if k == KindPair {
		return "pair"
	}
	return "request"
}

// Format is the format of a warm file, detected from its content.
type Format string

// Formats of a warm file.
const (
	FormatText  Format = "text"  // one prompt a line
	FormatJSONL Format = "jsonl" // chat requests and/or answered pairs
)

// Item is one line of a warm file. An item with Err is malformed: it is
// reported (by File and Line) and never sent.
type Item struct {
	File    string          `json:"file"`
	Line    int             `json:"line"`
	Kind    Kind            `json:"-"`
	Tenant  string          `json:"tenant,omitempty"`
	Request json.RawMessage `json:"request,omitempty"` // a /v1/chat/completions body, without "stream"
	Answer  string          `json:"answer,omitempty"`  // KindPair only
	Err     error           `json:"-"`
}

// Defaults fill what plain-text prompts (and requests and pairs without a
// model) leave out.
type Defaults struct {
	Model       string
	System      string
	Temperature *float64
	MaxTokens   int
	// Like, when set, is the request a plain-text prompt is sent as, with
	// the prompt as its last user message (frontdoor warm --like).
	Like *Like
}

// MaxLine is the longest line a warm file may have.
const MaxLine = 4 << 20

// ErrNoModel means plain-text prompts were given without a default model.
var ErrNoModel = errors.New("plain-text prompts need a model (frontdoor warm --model, ?model= on POST /admin/cache/warm, warm.model)")

// Parse reads a warm file. The format is detected from the first line that
// is neither blank nor a # comment: a JSON object makes the file JSON Lines,
// anything else plain text. Blank and # lines are skipped in both. A
// malformed line becomes an Item with Err; Parse itself fails only when the
// whole file can't be used.
func Parse(name string, data []byte, d Defaults) ([]Item, Format, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a UTF-8 BOM
	format := FormatText
	var items []Item
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), MaxLine)
	detected := false
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		if !detected {
			detected = true
			if b[0] == '{' {
				format = FormatJSONL
			} else if d.Model == "" {
				return nil, format, fmt.Errorf("%s: %w", name, ErrNoModel)
			}
		}
		it := Item{File: name, Line: line}
		var err error
		if !utf8.Valid(b) {
			err = errors.New("not valid UTF-8")
		} else if format == FormatText {
			it.Request, err = textRequest(string(b), d)
		} else {
			err = parseJSONLine(&it, b, d)
		}
		if err != nil {
			it.Err = fmt.Errorf("%s:%d: %w", name, line, err)
		}
		items = append(items, it)
	}
	if err := sc.Err(); err != nil {
		return items, format, fmt.Errorf("%s: %w", name, err)
	}
	return items, format, nil
}

func textRequest(prompt string, d Defaults) (json.RawMessage, error) {
	if d.Like != nil {
		req := d.Like.request(prompt)
		applyDefaults(req, d)
		return json.Marshal(req)
	}
	var msgs []map[string]string
	if d.System != "" {
		msgs = append(msgs, map[string]string{"role": "system", "content": d.System})
	}
	msgs = append(msgs, map[string]string{"role": "user", "content": prompt})
	req := map[string]any{"model": d.Model, "messages": msgs}
	applyDefaults(req, d)
	return json.Marshal(req)
}

func applyDefaults(req map[string]any, d Defaults) {
	if _, ok := req["model"]; !ok && d.Model != "" {
		req["model"] = d.Model
	}
	if _, ok := req["temperature"]; !ok && d.Temperature != nil {
		req["temperature"] = *d.Temperature
	}
	_, mt := req["max_tokens"]
	_, mct := req["max_completion_tokens"]
	if !mt && !mct && d.MaxTokens > 0 {
		req["max_tokens"] = d.MaxTokens
	}
}

// pairLine is an answered pair: the question (messages or prompt, with an
// optional system prompt and model), its answer and sampling params.
type pairLine struct {
	Tenant   string                     `json:"tenant"`
	Messages json.RawMessage            `json:"messages"`
	Prompt   *string                    `json:"prompt"`
	System   string                     `json:"system"`
	Model    string                     `json:"model"`
	Answer   *string                    `json:"answer"`
	Params   map[string]json.RawMessage `json:"params"`
}

func parseJSONLine(it *Item, b []byte, d Defaults) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	if top == nil {
		return errors.New("not a JSON object")
	}
	if _, ok := top["answer"]; ok {
		it.Kind = KindPair
		return parsePair(it, b, d)
	}
	req := top
	if r, ok := top["request"]; ok {
		if t, ok := top["tenant"]; ok {
			if err := json.Unmarshal(t, &it.Tenant); err != nil {
				return errors.New(`"tenant" must be a string`)
			}
		}
		req = nil
		if err := json.Unmarshal(r, &req); err != nil || req == nil {
			return errors.New(`"request" must be a JSON object`)
		}
	}
	var msgs []json.RawMessage
	if err := json.Unmarshal(req["messages"], &msgs); err != nil || len(msgs) == 0 {
		return errors.New(`a chat request needs a non-empty "messages" array`)
	}
	body := make(map[string]any, len(req)+2)
	for k, v := range req {
		body[k] = v
	}
	return finishRequest(it, body, d)
}

func parsePair(it *Item, b []byte, d Defaults) error {
	var p pairLine
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("answered pair: %w", err)
	}
	if p.Answer == nil || *p.Answer == "" {
		return errors.New(`"answer" must be a non-empty string`)
	}
	var msgs []json.RawMessage
	switch {
	case p.Prompt != nil && len(p.Messages) > 0:
		return errors.New(`give "messages" or "prompt", not both`)
	case p.Prompt != nil:
		if *p.Prompt == "" {
			return errors.New(`"prompt" is empty`)
		}
		m, _ := json.Marshal(map[string]string{"role": "user", "content": *p.Prompt})
		msgs = []json.RawMessage{m}
	default:
		if err := json.Unmarshal(p.Messages, &msgs); err != nil || len(msgs) == 0 {
			return errors.New(`an answered pair needs "messages" (a non-empty array) or "prompt"`)
		}
	}
	system := p.System
	if system == "" && p.Prompt != nil {
		system = d.System
	}
	if system != "" {
		m, _ := json.Marshal(map[string]string{"role": "system", "content": system})
		msgs = append([]json.RawMessage{m}, msgs...)
	}
	body := make(map[string]any, len(p.Params)+2)
	for k, v := range p.Params {
		body[k] = v
	}
	body["messages"] = msgs
	if p.Model != "" {
		body["model"] = p.Model
	}
	it.Tenant, it.Answer = p.Tenant, *p.Answer
	return finishRequest(it, body, d)
}

// finishRequest fills defaults, drops the transport-only fields and checks
// that a model is named.
func finishRequest(it *Item, body map[string]any, d Defaults) error {
	delete(body, "stream")
	delete(body, "stream_options")
	applyDefaults(body, d)
	m, ok := body["model"]
	if !ok {
		return errors.New(`no "model" (and no --model default)`)
	}
	switch v := m.(type) {
	case string:
		if v == "" {
			return errors.New(`"model" is empty`)
		}
	case json.RawMessage:
		var s string
		if json.Unmarshal(v, &s) != nil || s == "" {
			return errors.New(`"model" must be a non-empty string`)
		}
	}
	r, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("re-encode: %w", err)
	}
	it.Request = r
	return nil
}

// TagFor makes a tag of a file name: its base name, with characters other
// than letters, digits and ._:@+- replaced by '_', at most 128 bytes.
func TagFor(file string) string {
	if i := strings.LastIndexAny(file, `/\`); i >= 0 {
		file = file[i+1:]
	}
	b := []byte(file)
	if len(b) > 128 {
		b = b[:128]
	}
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:@+-", c) >= 0) {
			b[i] = '_'
		}
	}
	return string(b)
}
