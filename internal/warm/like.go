package warm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Like is one chat request as the app sends it (ParseLike). A plain-text
// prompt warmed with it is that request with the prompt as its last user
// message, so that the app's request for the same question has the same
// exact key and semantic scope: the cache keys every message and every
// parameter that changes the answer.
type Like struct {
	fields   map[string]json.RawMessage // all but messages and the transport-only fields
	messages []json.RawMessage
	last     int  // the last user message
	parts    bool // its content is an array of text parts
}

// ParseLike reads one chat request: the first JSON object in data (a file
// may hold it pretty-printed, or be a JSON Lines file whose first line is
// the request), or the "request" of such an object (a line of frontdoor
// cache export or of a warm file). It needs a model and a last user
// message whose content is text.
func ParseLike(data []byte) (*Like, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	dec := json.NewDecoder(bytes.NewReader(data))
	var fields map[string]json.RawMessage
	if err := dec.Decode(&fields); err != nil || fields == nil {
		return nil, fmt.Errorf("not a chat request (a JSON object): %v", err)
	}
	if _, ok := fields["messages"]; !ok && fields["request"] != nil {
		var inner map[string]json.RawMessage
		if err := json.Unmarshal(fields["request"], &inner); err != nil || inner == nil {
			return nil, errors.New(`"request" is not a chat request`)
		}
		fields = inner
	}
	l := &Like{fields: fields, last: -1}
	if err := json.Unmarshal(fields["messages"], &l.messages); err != nil || len(l.messages) == 0 {
		return nil, errors.New(`no "messages" array`)
	}
	for i, m := range l.messages {
		var msg struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(m, &msg) == nil && msg.Role == "user" {
			l.last, l.parts = i, textParts(msg.Content)
			if !l.parts && !isString(msg.Content) {
				return nil, fmt.Errorf("messages[%d]: the last user message's content is not text", i)
			}
		}
	}
	if l.last < 0 {
		return nil, errors.New("no user message: the prompt takes the place of the last one")
	}
	if l.Model() == "" {
		return nil, errors.New(`no "model"`)
	}
	for _, k := range []string{"messages", "stream", "stream_options"} {
		delete(l.fields, k)
	}
	return l, nil
}

func isString(v json.RawMessage) bool {
	var s string
	return json.Unmarshal(v, &s) == nil
}

// textParts reports whether v is an array of text content parts.
func textParts(v json.RawMessage) bool {
	var parts []struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(v, &parts) != nil || len(parts) == 0 {
		return false
	}
	for _, p := range parts {
		if p.Type != "text" {
			return false
		}
	}
	return true
}

// Model is the request's model.
func (l *Like) Model() string {
	var m string
	_ = json.Unmarshal(l.fields["model"], &m)
	return m
}

// request is l with prompt as its last user message.
func (l *Like) request(prompt string) map[string]any {
	body := make(map[string]any, len(l.fields)+1)
	for k, v := range l.fields {
		body[k] = v
	}
	msgs := make([]json.RawMessage, len(l.messages))
	copy(msgs, l.messages)
	var last map[string]json.RawMessage
	_ = json.Unmarshal(l.messages[l.last], &last)
	var content any = prompt
	if l.parts {
		content = []map[string]string{{"type": "text", "text": prompt}}
	}
	last["content"], _ = json.Marshal(content)
	msgs[l.last], _ = json.Marshal(last)
	body["messages"] = msgs
	return body
}

// ParamSet is what a chat request sends besides its question: its
// parameters (every field but the messages and the transport-only ones),
// whether it has a system prompt (by a digest of it) and how many other
// messages come before the question. Requests of one parameter set share
// their cache scope; warmed entries answer only their own.
type ParamSet struct {
	Params json.RawMessage `json:"params"`
	// System is the first 12 hex digits of the SHA-256 of the system
	// messages' content, "" without one: the prompt itself is not shown.
	System string `json:"system_sha256,omitempty"`
	// Prior counts the messages before the last user message, the
	// system ones aside.
	Prior    int   `json:"prior_messages,omitempty"`
	Requests int64 `json:"requests,omitempty"`
}

// Key is the set's identity: requests of equal keys share parameters.
func (p ParamSet) Key() string {
	return string(p.Params) + "\x00" + p.System + "\x00" + fmt.Sprint(p.Prior)
}

// String is the set as the warm command prints it.
func (p ParamSet) String() string {
	var b strings.Builder
	b.Write(p.Params)
	if p.System != "" {
		b.WriteString(", a system prompt (sha256 " + p.System + ")")
	} else {
		b.WriteString(", no system prompt")
	}
	if p.Prior > 0 {
		fmt.Fprintf(&b, ", %d earlier messages", p.Prior)
	}
	return b.String()
}

// ParamSetOf reads the parameter set of a chat request body.
func ParamSetOf(body []byte) (ParamSet, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return ParamSet{}, err
	}
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(fields["messages"], &msgs); err != nil {
		return ParamSet{}, errors.New(`no "messages" array`)
	}
	for _, k := range []string{"messages", "stream", "stream_options"} {
		delete(fields, k)
	}
	var ps ParamSet
	var err error
	if ps.Params, err = json.Marshal(fields); err != nil { // sorted keys
		return ParamSet{}, err
	}
	last := -1
	for i, m := range msgs {
		if m.Role == "user" {
			last = i
		}
	}
	h := sha256.New()
	system := false
	for i, m := range msgs {
		switch {
		case m.Role == "system" || m.Role == "developer":
			system = true
			h.Write(m.Content)
		case i < last:
			ps.Prior++
		}
	}
	if system {
		ps.System = hex.EncodeToString(h.Sum(nil))[:12]
	}
	return ps, nil
}

// ParamReport is GET /admin/cache/params: the parameter sets of the
// clients' chat requests, most common first.
type ParamReport struct {
	// Sampled is how many chat requests were read (one in 8; warm-ups and
	// other requests with an X-Cache-Tag are not counted).
	Sampled int64      `json:"sampled_requests"`
	Sets    []ParamSet `json:"sets"`
}

// FetchParamSets reads a gateway's GET /admin/cache/params?top=N with the
// admin token.
func FetchParamSets(ctx context.Context, client *http.Client, baseURL, adminToken string, top int) (ParamReport, error) {
	if client == nil {
		client = http.DefaultClient
	}
	var r ParamReport
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(baseURL, "/")+"/admin/cache/params?top="+strconv.Itoa(top), nil)
	if err != nil {
		return r, err
	}
	if adminToken != "" {
		req.Header.Set("Authorization", "Bearer "+adminToken)
	}
	resp, err := client.Do(req)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return r, err
	}
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("GET /admin/cache/params: %s", resp.Status)
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return r, fmt.Errorf("GET /admin/cache/params: %w", err)
	}
	return r, nil
}
