package adapters

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"frontdoor/internal/redact"
)

// Kind is an upstream engine flavour.
type Kind string

// Upstream kinds.
const (
	KindVLLM      Kind = "vllm"
	KindTGI       Kind = "tgi"
	KindSGLang    Kind = "sglang"
	KindOpenAI    Kind = "openai"
	KindDashScope Kind = "dashscope"
)

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool {
	switch k {
	case KindVLLM, KindTGI, KindSGLang, KindOpenAI, KindDashScope:
		return true
	}
	return false
}

// Config holds the upstream client settings shared by every backend.
type Config struct {
	Connect   time.Duration // TCP connect timeout
	FirstByte time.Duration // streams: time until the response headers
	Idle      time.Duration // streams: longest gap between two reads
	Total     time.Duration // whole exchange; also the deadline of a non-streaming answer
	MaxConns  int           // connection pool size per upstream
	TLS       *tls.Config   // for https upstreams; nil: the system's roots
	// MaxBody bounds an answer read whole (a non-streaming answer, or a
	// JSON answer to a streaming request): past it the answer is refused
	// with ErrAnswerTooLarge and its connection closed, unread.
	MaxBody int
}

// DefaultMaxBody is the default of Config.MaxBody: 16 MiB.
const DefaultMaxBody = 16 << 20

// DefaultConfig returns the defaults of the timeouts: section.
func DefaultConfig() Config {
	return Config{Connect: 2 * time.Second, FirstByte: 60 * time.Second, Idle: 30 * time.Second, Total: 10 * time.Minute, MaxConns: 1024, MaxBody: DefaultMaxBody}
}

// Validate checks the settings.
func (c Config) Validate() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"connect", c.Connect}, {"first_byte", c.FirstByte}, {"idle", c.Idle}, {"total", c.Total}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be > 0", d.name))
		}
	}
	if c.MaxConns < 1 {
		errs = append(errs, errors.New("max_conns: must be >= 1"))
	}
	if c.MaxBody < 1 {
		errs = append(errs, errors.New("max_body: must be >= 1"))
	}
	return errors.Join(errs...)
}

// Target names an upstream.
type Target struct {
	Name    string
	URL     string // server root (http://h:9001) or an OpenAI base ending in /v1
	Kind    Kind
	APIKey  string // sent as the upstream bearer token; never logged
	Headers map[string]string
	// ResponsesURL is the absolute URL of the upstream's Responses API
	// when it is not the base URL's /responses (DashScope serves it under
	// another path); on the base URL's scheme and host.
	ResponsesURL string
}

// BaseURL returns the OpenAI base of a target URL: its path if that ends in
// a version segment such as /v1, else the path plus /v1.
func BaseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("invalid url: %w", redact.ParseError(err)) // not quoting the URL: it may hold a password
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, errors.New("missing scheme: want http:// or https://")
	}
	if u.Host == "" {
		return nil, errors.New("missing host")
	}
	p := strings.TrimSuffix(u.Path, "/")
	if last := p[strings.LastIndexByte(p, '/')+1:]; !(len(last) >= 2 && last[0] == 'v' && last[1] >= '0' && last[1] <= '9') {
		p += "/v1"
	}
	u.Path = p
	return u, nil
}
