package embed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"frontdoor/internal/redact"
)

var _ Embedder = (*OpenAI)(nil)

// ErrUnavailable is wrapped by Embed's error while the endpoint is resting
// after a failure: the call fails at once instead of waiting on a dead server.
var ErrUnavailable = errors.New("embeddings endpoint unavailable")

// ErrEmptyText is wrapped by Embed's error for empty or blank text, which
// embedding servers reject.
var ErrEmptyText = errors.New("empty text")

// Back-off after failures that suggest the endpoint is down or overloaded:
// base doubling per consecutive failure, up to max.
const (
	backoffBase = 200 * time.Millisecond
	backoffMax  = 5 * time.Second
	// maxErrorBody bounds how much of an error response goes into an error.
	maxErrorBody = 200
)

// OpenAI embeds text with an OpenAI-compatible POST {url}/embeddings
// endpoint (vLLM, TEI, Ollama, DashScope, ...). Concurrent Embed calls within
// BatchWait are sent as one request of up to BatchSize texts; recent texts
// are answered from an LRU memo; after a transport error, timeout, HTTP 429
// or 5xx, calls fail fast with ErrUnavailable for a short, growing back-off.
// One bad text (too long for the model, say) fails its whole batch.
type OpenAI struct {
	name      string
	endpoint  string // full URL of the embeddings route
	safeURL   string // endpoint with any user information masked, for errors
	model     string
	auth      string // "Bearer <key>" or ""
	key       string // redacted from error text
	dims      int
	timeout   time.Duration
	batchSize int
	batchWait time.Duration
	client    *fasthttp.Client
	memo      *memo
	parsers   fastjson.ParserPool

	mu        sync.Mutex
	open      *batch // gathering texts, not yet sent
	failures  int    // consecutive endpoint failures
	downUntil time.Time
}

// batch is one request's worth of texts and, once done is closed, its result.
type batch struct {
	texts []string
	index map[string]int
	timer *time.Timer
	done  chan struct{}
	vecs  [][]float32
	err   error
}

// NewOpenAI validates cfg (as kind openai) and returns its embedder. The API
// key is read once, here, from the variable named by cfg.APIKeyEnv.
func NewOpenAI(cfg Config) (*OpenAI, error) {
	cfg.Kind = KindOpenAI
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("embed: %w", err)
	}
	var key string
	if cfg.APIKeyEnv != "" {
		key = os.Getenv(cfg.APIKeyEnv)
		if key == "" {
			return nil, fmt.Errorf("embed: api_key_env: environment variable %s is empty or unset", cfg.APIKeyEnv)
		}
	}
	endpoint := strings.TrimRight(cfg.URL, "/") + "/embeddings"
	if _, err := url.Parse(endpoint); err != nil {
		return nil, fmt.Errorf("embed: url: %w", redact.ParseError(err))
	}
	o := &OpenAI{
		name:      "openai:" + cfg.Model,
		endpoint:  endpoint,
		safeURL:   redact.URL(endpoint),
		model:     cfg.Model,
		key:       key,
		dims:      cfg.Dims,
		timeout:   cfg.Timeout.D(),
		batchSize: cfg.BatchSize,
		batchWait: cfg.BatchWait.D(),
		memo:      newMemo(cfg.MemoEntries),
		client: &fasthttp.Client{
			Name:                "frontdoor-embed",
			MaxConnsPerHost:     64,
			MaxIdleConnDuration: 30 * time.Second,
			ReadTimeout:         cfg.Timeout.D(),
			WriteTimeout:        cfg.Timeout.D(),
			MaxResponseBodySize: 64 << 20,
		},
	}
	if key != "" {
		o.auth = "Bearer " + key
	}
	return o, nil
}

// Dims returns the configured vector length; responses of another length are errors.
func (o *OpenAI) Dims() int { return o.dims }

// Name returns "openai:<model>".
func (o *OpenAI) Name() string { return o.name }

// Embed returns the L2-normalised embedding of text. It waits at most
// BatchWait to share a request with concurrent calls, then at most Timeout
// for the server, and returns early when ctx ends.
func (o *OpenAI) Embed(ctx context.Context, text string) ([]float32, error) {
	if strings.TrimSpace(text) == "" {
		return nil, fmt.Errorf("embed: %w", ErrEmptyText)
	}
	if v, ok := o.memo.get(text); ok {
		return v, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("embed: %w", err)
	}
	b, i, err := o.enqueue(text)
	if err != nil {
		return nil, err
	}
	select {
	case <-b.done:
		if b.err != nil {
			return nil, b.err
		}
		return clone(b.vecs[i]), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("embed: %w", ctx.Err())
	}
}

// enqueue adds text to the open batch, sending the batch when it is full,
// and returns the batch and the text's position in it.
func (o *OpenAI) enqueue(text string) (*batch, int, error) {
	o.mu.Lock()
	if wait := time.Until(o.downUntil); wait > 0 {
		o.mu.Unlock()
		return nil, 0, fmt.Errorf("embed: %w (retrying in %s)", ErrUnavailable, wait.Round(time.Millisecond))
	}
	b := o.open
	if b == nil {
		b = &batch{index: map[string]int{}, done: make(chan struct{})}
		o.open = b
		b.timer = time.AfterFunc(o.batchWait, func() { o.sendIfOpen(b) })
	}
	i, ok := b.index[text]
	if !ok {
		i = len(b.texts)
		b.texts = append(b.texts, text)
		b.index[text] = i
	}
	full := len(b.texts) >= o.batchSize
	if full {
		o.open = nil
		b.timer.Stop()
	}
	o.mu.Unlock()
	if full {
		go o.send(b)
	}
	return b, i, nil
}

// sendIfOpen sends b when its wait is over, unless it already went out full.
func (o *OpenAI) sendIfOpen(b *batch) {
	o.mu.Lock()
	if o.open != b {
		o.mu.Unlock()
		return
	}
	o.open = nil
	o.mu.Unlock()
	o.send(b)
}

// send makes the HTTP call for b, records the outcome and wakes its waiters.
func (o *OpenAI) send(b *batch) {
	vecs, endpointDown, err := o.call(b.texts)
	o.mu.Lock()
	if endpointDown {
		o.failures++
		o.downUntil = time.Now().Add(min(backoffBase<<min(o.failures-1, 16), backoffMax))
	} else if err == nil {
		o.failures = 0
	}
	o.mu.Unlock()
	if err == nil {
		for i, t := range b.texts {
			o.memo.put(t, vecs[i])
		}
	}
	b.vecs, b.err = vecs, err
	close(b.done)
}

// call posts texts and returns their normalised vectors in order. endpointDown
// reports failures worth backing off from.
func (o *OpenAI) call(texts []string) (vecs [][]float32, endpointDown bool, err error) {
	body, err := json.Marshal(struct {
		Model string   `json:"model"`
		Input []string `json:"input"`
	}{o.model, texts})
	if err != nil {
		return nil, false, fmt.Errorf("embed: encode request: %w", err)
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(o.endpoint)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	if o.auth != "" {
		req.Header.Set(fasthttp.HeaderAuthorization, o.auth)
	}
	req.SetBodyRaw(body)

	if err := o.client.DoTimeout(req, resp, o.timeout); err != nil {
		return nil, true, fmt.Errorf("embed: POST %s: %w", o.safeURL, o.redact(err))
	}
	if status := resp.StatusCode(); status != fasthttp.StatusOK {
		snippet := resp.Body()
		if len(snippet) > maxErrorBody {
			snippet = snippet[:maxErrorBody]
		}
		down := status == fasthttp.StatusTooManyRequests || status >= 500
		return nil, down, fmt.Errorf("embed: POST %s: HTTP %d: %s", o.safeURL, status, o.redactString(string(snippet)))
	}
	vecs, err = o.parse(resp.Body(), len(texts))
	if err != nil {
		return nil, false, fmt.Errorf("embed: POST %s: %w", o.safeURL, err)
	}
	return vecs, false, nil
}

// parse reads data[i].embedding, placed by data[i].index, and normalises each.
func (o *OpenAI) parse(body []byte, n int) ([][]float32, error) {
	p := o.parsers.Get()
	defer o.parsers.Put(p)
	v, err := p.ParseBytes(body)
	if err != nil {
		return nil, fmt.Errorf("decode response: %w", err)
	}
	data := v.GetArray("data")
	if len(data) != n {
		return nil, fmt.Errorf("response has %d embeddings for %d inputs", len(data), n)
	}
	vecs := make([][]float32, n)
	for pos, item := range data {
		idx := pos
		if iv := item.Get("index"); iv != nil {
			if idx, err = iv.Int(); err != nil {
				return nil, fmt.Errorf("data[%d].index: %w", pos, err)
			}
		}
		if idx < 0 || idx >= n || vecs[idx] != nil {
			return nil, fmt.Errorf("data[%d].index %d is out of range or repeated", pos, idx)
		}
		nums := item.GetArray("embedding")
		if len(nums) != o.dims {
			return nil, fmt.Errorf("dims: the server returned %d-dimensional embeddings but dims is %d; set dims to %d for model %q",
				len(nums), o.dims, len(nums), o.model)
		}
		vec := make([]float32, len(nums))
		for j, x := range nums {
			f, err := x.Float64()
			if err != nil {
				return nil, fmt.Errorf("data[%d].embedding[%d]: %w", pos, j, err)
			}
			vec[j] = float32(f)
		}
		if !normalize(vec) {
			return nil, fmt.Errorf("data[%d].embedding is all zeros or not finite", pos)
		}
		vecs[idx] = vec
	}
	return vecs, nil
}

// redact keeps the API key out of error text, in case a layer echoes it.
func (o *OpenAI) redact(err error) error {
	if o.key == "" || !strings.Contains(err.Error(), o.key) {
		return err
	}
	return redactedError{msg: o.redactString(err.Error()), err: err}
}

func (o *OpenAI) redactString(s string) string {
	if o.key == "" {
		return s
	}
	return strings.ReplaceAll(s, o.key, "[redacted]")
}

// redactedError shows a cleaned message but still unwraps to the original.
type redactedError struct {
	msg string
	err error
}

func (e redactedError) Error() string { return e.msg }
func (e redactedError) Unwrap() error { return e.err }

func clone(v []float32) []float32 { return append([]float32(nil), v...) }
