package cache

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"
)

// Usage is the token accounting of a stored answer.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Entry is one stored answer: enough to replay it as a chat.completion JSON
// or as an SSE stream.
type Entry struct {
	ID        string          `json:"id"`       // stable id, for X-Cache-Entry and admin deletes
	Namespace string          `json:"ns"`       // tenant cache namespace
	Model     string          `json:"model"`    // the model that answered
	Endpoint  string          `json:"endpoint"` // "chat" or "completion"
	Content   string          `json:"content"`  // assembled answer text
	Reasoning string          `json:"reasoning,omitempty"`
	ToolCalls json.RawMessage `json:"tool_calls,omitempty"` // OpenAI tool_calls array
	Finish    string          `json:"finish"`
	Usage     Usage           `json:"usage"`
	Created   time.Time       `json:"created"`
	Query     string          `json:"query,omitempty"` // last user turn, semantic entries only
	Scope     string          `json:"scope,omitempty"` // semantic scope hash
	ExactKey  string          `json:"key,omitempty"`   // exact key it is stored under
	Tag       string          `json:"tag,omitempty"`   // set by a warm-up (X-Cache-Tag), for PurgeTag
	// Curated: stored by an import or a warm-up, not by a client's
	// request: a vetted answer that approved near-misses point at.
	Curated bool `json:"curated,omitempty"`
	// Via is the curated entry whose answer this one repeats for a
	// question the judge approved (a promoted near-miss). A promoted entry
	// is never curated itself, so it never anchors a further promotion.
	Via string `json:"via,omitempty"`
	// Embedding is an embeddings entry's vector (Endpoint "embeddings"):
	// little-endian float32s, 4 bytes a dimension, charged to the byte
	// budget like the rest. EmbeddingWide says how a float answer writes
	// its numbers (adapters.Embedding.Wide).
	Embedding     []byte `json:"emb,omitempty"`
	EmbeddingWide bool   `json:"emb_wide,omitempty"`
}

// EndpointEmbeddings is the Endpoint of an embeddings entry: one input's
// vector.
const EndpointEmbeddings = "embeddings"

// Size is an estimate of the memory the entry holds, for the byte budget.
func (e *Entry) Size() int64 {
	return int64(256 + len(e.ID) + len(e.Namespace) + len(e.Model) + len(e.Content) + len(e.Reasoning) +
		len(e.ToolCalls) + len(e.Query) + len(e.Scope) + len(e.ExactKey) + len(e.Tag) + len(e.Via) + len(e.Embedding))
}

// NewEntryID returns a random 16-hex-digit id.
func NewEntryID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Marshal encodes the entry for a remote store.
func (e *Entry) Marshal() ([]byte, error) { return json.Marshal(e) }

// Anchor reports whether an approved near-miss may be promoted to the
// entry's answer: an operator's entry (import, warm-up), not a promoted one.
func (e *Entry) Anchor() bool { return e.Curated && e.Via == "" }

// UnmarshalEntry decodes what Marshal wrote. An entry promoted by an older
// version (curated and via both set) decodes as promoted: not curated.
func UnmarshalEntry(b []byte) (*Entry, error) {
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, err
	}
	if e.Via != "" {
		e.Curated = false
	}
	return &e, nil
}

// ValidTag returns t when it is a usable tag: 1 to 128 bytes of letters,
// digits and ._:/@+-; else "" (the entry is stored untagged).
func ValidTag(t []byte) string {
	if len(t) == 0 || len(t) > 128 {
		return ""
	}
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:/@+-", c) >= 0) {
			return ""
		}
	}
	return string(t)
}
