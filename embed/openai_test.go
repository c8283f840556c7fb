package embed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"frontdoor/internal/units"
)

// fakeEmbeddings is an in-process OpenAI-compatible /v1/embeddings server.
// Its vectors are the local embedder's, scaled by 3 so that the client must
// normalise them, and listed in reverse order so that it must use index.
type fakeEmbeddings struct {
	url    string
	dims   int
	local  *Local
	calls  atomic.Int32
	status atomic.Int32  // HTTP status to answer with; 200 by default
	delay  atomic.Int64  // nanoseconds to wait before answering
	extra  atomic.Int32  // added to the vector length, to fake a dims mismatch
	stop   chan struct{} // ends delays at shutdown
	mu     sync.Mutex
	auth   []string   // Authorization header of each call
	inputs [][]string // input of each call
}

func newFakeEmbeddings(t *testing.T, dims int) *fakeEmbeddings {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeEmbeddings{
		url:   "http://" + ln.Addr().String() + "/v1",
		dims:  dims,
		local: NewLocal(dims),
		stop:  make(chan struct{}),
	}
	f.status.Store(fasthttp.StatusOK)
	srv := &fasthttp.Server{Handler: f.handle}
	go srv.Serve(ln) //nolint:errcheck // ends with the listener
	t.Cleanup(func() {
		close(f.stop)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.ShutdownWithContext(ctx) //nolint:errcheck // best effort in a test
	})
	return f
}

func (f *fakeEmbeddings) handle(ctx *fasthttp.RequestCtx) {
	f.calls.Add(1)
	if string(ctx.Path()) != "/v1/embeddings" || !ctx.IsPost() {
		ctx.Error("not found", fasthttp.StatusNotFound)
		return
	}
	var req struct {
		Model string   `json:"model"`
		Input []string `json:"input"`
	}
	if err := json.Unmarshal(ctx.PostBody(), &req); err != nil || req.Model == "" {
		ctx.Error("bad request", fasthttp.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.auth = append(f.auth, string(ctx.Request.Header.Peek("Authorization")))
	f.inputs = append(f.inputs, req.Input)
	f.mu.Unlock()
	if d := time.Duration(f.delay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-f.stop:
		}
	}
	if status := int(f.status.Load()); status != fasthttp.StatusOK {
		// Echo the Authorization header, as a careless proxy might.
		ctx.Error(fmt.Sprintf("upstream failed; auth was %s", ctx.Request.Header.Peek("Authorization")), status)
		return
	}
	type item struct {
		Object    string    `json:"object"`
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	}
	resp := struct {
		Object string `json:"object"`
		Data   []item `json:"data"`
		Model  string `json:"model"`
	}{Object: "list", Model: req.Model}
	for i := len(req.Input) - 1; i >= 0; i-- {
		v := f.vector(req.Input[i])
		v = append(v, make([]float32, int(f.extra.Load()))...)
		resp.Data = append(resp.Data, item{"embedding", i, v})
	}
	body, _ := json.Marshal(resp)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// vector is what the server returns for text, before any client normalising.
func (f *fakeEmbeddings) vector(text string) []float32 {
	v := f.local.embed(text)
	for i := range v {
		v[i] *= 3
	}
	return v
}

func (f *fakeEmbeddings) config() Config {
	c := DefaultConfig()
	c.Kind, c.URL, c.Model, c.Dims = KindOpenAI, f.url, "fake-embed", f.dims
	return c
}

func newTestOpenAI(t *testing.T, cfg Config) *OpenAI {
	t.Helper()
	o, err := NewOpenAI(cfg)
	if err != nil {
		t.Fatalf("NewOpenAI: %v", err)
	}
	return o
}

func TestOpenAIEmbedNormalisesAndMatchesIndex(t *testing.T) {
	f := newFakeEmbeddings(t, 64)
	o := newTestOpenAI(t, f.config())
	ctx := context.Background()
	for _, text := range []string{"first text", "second text", "第三个文本"} {
		v, err := o.Embed(ctx, text)
		if err != nil {
			t.Fatal(err)
		}
		want := f.local.embed(text) // the server's vector, normalised
		if len(v) != 64 || Cosine(v, want) < 0.9999 {
			t.Fatalf("Embed(%q): len %d, cosine to expected %v", text, len(v), Cosine(v, want))
		}
	}
	if o.Name() != "openai:fake-embed" || o.Dims() != 64 {
		t.Errorf("Name/Dims = %s/%d", o.Name(), o.Dims())
	}
}

func TestOpenAIBatchesConcurrentCalls(t *testing.T) {
	f := newFakeEmbeddings(t, 32)
	cfg := f.config()
	cfg.BatchWait = units.Duration(50 * time.Millisecond)
	cfg.BatchSize = 8
	o := newTestOpenAI(t, cfg)

	const n = 20
	var wg sync.WaitGroup
	vecs := make([][]float32, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			vecs[i], errs[i] = o.Embed(context.Background(), fmt.Sprintf("concurrent text number %d", i))
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Embed %d: %v", i, errs[i])
		}
		if want := f.local.embed(fmt.Sprintf("concurrent text number %d", i)); Cosine(vecs[i], want) < 0.9999 {
			t.Fatalf("Embed %d got another text's vector", i)
		}
	}
	calls := int(f.calls.Load())
	if calls >= n || calls < (n+cfg.BatchSize-1)/cfg.BatchSize {
		t.Fatalf("%d concurrent texts took %d calls, want between %d and %d", n, calls, (n+7)/8, n-1)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, in := range f.inputs {
		if len(in) > cfg.BatchSize {
			t.Fatalf("a call carried %d texts, more than batch_size %d", len(in), cfg.BatchSize)
		}
	}
}

func TestOpenAIDeduplicatesWithinBatch(t *testing.T) {
	f := newFakeEmbeddings(t, 16)
	cfg := f.config()
	cfg.BatchWait = units.Duration(50 * time.Millisecond)
	o := newTestOpenAI(t, cfg)
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			if _, err := o.Embed(context.Background(), "same text"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	total := 0
	for _, in := range f.inputs {
		total += len(in)
	}
	if total != 1 {
		t.Fatalf("the server embedded %d copies of one text, want 1", total)
	}
}

func TestOpenAIMemo(t *testing.T) {
	f := newFakeEmbeddings(t, 16)
	cfg := f.config()
	cfg.MemoEntries = 2
	o := newTestOpenAI(t, cfg)
	ctx := context.Background()
	embed := func(text string) []float32 {
		t.Helper()
		v, err := o.Embed(ctx, text)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	a1 := embed("alpha")
	a1[0] = 42 // the caller owns its copy: this must not reach the memo
	a2 := embed("alpha")
	if got := f.calls.Load(); got != 1 {
		t.Fatalf("same text twice made %d calls, want 1", got)
	}
	if a2[0] == 42 {
		t.Fatal("memo returned a vector the caller had changed")
	}
	embed("beta")
	embed("gamma") // evicts alpha, the least recently used
	if got := f.calls.Load(); got != 3 {
		t.Fatalf("calls = %d, want 3", got)
	}
	embed("gamma")
	embed("alpha")
	if got := f.calls.Load(); got != 4 {
		t.Fatalf("after eviction calls = %d, want 4 (alpha again)", got)
	}
}

func TestOpenAISendsAPIKeyAndNeverLeaksIt(t *testing.T) {
	const key = "sk-test-very-secret-0123456789"
	t.Setenv("FRONTDOOR_TEST_EMBED_KEY", key)
	f := newFakeEmbeddings(t, 16)
	cfg := f.config()
	cfg.APIKeyEnv = "FRONTDOOR_TEST_EMBED_KEY"
	o := newTestOpenAI(t, cfg)
	if _, err := o.Embed(context.Background(), "hello"); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	got := f.auth[0]
	f.mu.Unlock()
	if got != "Bearer "+key {
		t.Fatalf("Authorization = %q, want the bearer key", got)
	}

	f.status.Store(fasthttp.StatusInternalServerError) // the body echoes the key
	_, err := o.Embed(context.Background(), "another text")
	if err == nil {
		t.Fatal("want an error from HTTP 500")
	}
	if strings.Contains(err.Error(), key) {
		t.Fatalf("error leaks the API key: %v", err)
	}
	if !strings.Contains(err.Error(), "500") || !strings.Contains(err.Error(), "[redacted]") {
		t.Fatalf("error = %v, want the status and a redacted body", err)
	}
}

func TestOpenAIMissingKeyEnv(t *testing.T) {
	t.Setenv("FRONTDOOR_TEST_EMPTY_KEY", "")
	c := DefaultConfig()
	c.Kind, c.URL, c.Model, c.APIKeyEnv = KindOpenAI, "http://127.0.0.1:1/v1", "m", "FRONTDOOR_TEST_EMPTY_KEY"
	_, err := NewOpenAI(c)
	if err == nil || !strings.Contains(err.Error(), "api_key_env:") {
		t.Fatalf("NewOpenAI with an empty key variable: err = %v, want an api_key_env error", err)
	}
}

func TestOpenAITimeoutFailsFastThenBacksOff(t *testing.T) {
	f := newFakeEmbeddings(t, 16)
	f.delay.Store(int64(3 * time.Second))
	cfg := f.config()
	cfg.Timeout = units.Duration(100 * time.Millisecond)
	o := newTestOpenAI(t, cfg)

	start := time.Now()
	_, err := o.Embed(context.Background(), "slow")
	if err == nil {
		t.Fatal("want a timeout error")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("timed out after %s, want about 100ms", d)
	}
	if !errors.Is(err, fasthttp.ErrTimeout) {
		t.Errorf("error %v does not wrap fasthttp.ErrTimeout", err)
	}

	// While backing off, calls fail at once without reaching the server.
	calls := f.calls.Load()
	start = time.Now()
	_, err = o.Embed(context.Background(), "next")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("during back-off err = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 20*time.Millisecond {
		t.Errorf("back-off rejection took %s", d)
	}
	if f.calls.Load() != calls {
		t.Error("a call reached the server during back-off")
	}
}

func TestOpenAIRecoversAfterBackoff(t *testing.T) {
	f := newFakeEmbeddings(t, 16)
	f.status.Store(fasthttp.StatusServiceUnavailable)
	o := newTestOpenAI(t, f.config())
	if _, err := o.Embed(context.Background(), "x"); err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("first failure: err = %v, want the HTTP error itself", err)
	}
	f.status.Store(fasthttp.StatusOK)
	time.Sleep(backoffBase + 50*time.Millisecond)
	if _, err := o.Embed(context.Background(), "x"); err != nil {
		t.Fatalf("after the back-off: %v", err)
	}
}

func TestOpenAIClientErrorDoesNotBackOff(t *testing.T) {
	f := newFakeEmbeddings(t, 16)
	f.status.Store(fasthttp.StatusBadRequest)
	o := newTestOpenAI(t, f.config())
	for i := range 2 {
		_, err := o.Embed(context.Background(), fmt.Sprintf("text %d", i))
		if err == nil || errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "HTTP 400") {
			t.Fatalf("call %d: err = %v, want the HTTP 400 error", i, err)
		}
	}
	if got := f.calls.Load(); got != 2 {
		t.Fatalf("calls = %d, want 2: a 400 is the request's fault, not the endpoint's", got)
	}
}

func TestOpenAIServerError(t *testing.T) {
	f := newFakeEmbeddings(t, 16)
	f.status.Store(fasthttp.StatusInternalServerError)
	o := newTestOpenAI(t, f.config())
	v, err := o.Embed(context.Background(), "x")
	if err == nil || v != nil {
		t.Fatalf("HTTP 500: got %v, %v; want an error", v, err)
	}
	if !strings.Contains(err.Error(), "HTTP 500") {
		t.Errorf("error %q does not give the status", err)
	}
}

func TestOpenAIDimsMismatch(t *testing.T) {
	f := newFakeEmbeddings(t, 16)
	f.extra.Store(8) // the server returns 24 dims
	o := newTestOpenAI(t, f.config())
	_, err := o.Embed(context.Background(), "x")
	if err == nil {
		t.Fatal("want a dims mismatch error")
	}
	for _, want := range []string{"dims", "24", "16"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // nothing listens there once it returns
	return ln.Addr().String()
}

func TestOpenAIEndpointDown(t *testing.T) {
	addr := closedAddr(t)
	c := DefaultConfig()
	c.Kind, c.URL, c.Model = KindOpenAI, "http://"+addr+"/v1", "m"
	o := newTestOpenAI(t, c)
	start := time.Now()
	if _, err := o.Embed(context.Background(), "x"); err == nil {
		t.Fatal("want an error with no server")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("refused connection took %s to fail", d)
	}
}

func TestOpenAIContextCancel(t *testing.T) {
	f := newFakeEmbeddings(t, 16)
	f.delay.Store(int64(time.Second))
	o := newTestOpenAI(t, f.config())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := o.Embed(ctx, "x")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("returned after %s, want about 50ms", d)
	}

	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	calls := f.calls.Load()
	if _, err := o.Embed(done, "y"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: err = %v", err)
	}
	if f.calls.Load() != calls {
		t.Error("a call with a cancelled context reached the server")
	}
}

func TestOpenAIEmptyText(t *testing.T) {
	f := newFakeEmbeddings(t, 16)
	o := newTestOpenAI(t, f.config())
	for _, text := range []string{"", "  \n\t"} {
		if _, err := o.Embed(context.Background(), text); !errors.Is(err, ErrEmptyText) {
			t.Fatalf("Embed(%q) err = %v, want ErrEmptyText", text, err)
		}
	}
	if f.calls.Load() != 0 {
		t.Fatal("empty text reached the server")
	}
}

func TestMemoLRU(t *testing.T) {
	m := newMemo(3)
	for _, k := range []string{"a", "b", "c"} {
		m.put(k, []float32{float32(k[0])})
	}
	m.get("a") // a is now the most recent; b the least
	m.put("d", []float32{4})
	if _, ok := m.get("b"); ok {
		t.Error("b should have been evicted")
	}
	for _, k := range []string{"a", "c", "d"} {
		if _, ok := m.get(k); !ok {
			t.Errorf("%s missing", k)
		}
	}
	if m.len() != 3 {
		t.Errorf("len = %d, want 3", m.len())
	}
	m.put("a", []float32{9})
	if v, _ := m.get("a"); !slices.Equal(v, []float32{9}) {
		t.Errorf("updated a = %v", v)
	}
}

// Credentials in the embedder URL (http://user:password@host) are in no
// error: neither the password nor the user name, which is often a token.
func TestOpenAIURLCredentialsNotInErrors(t *testing.T) {
	const user, password = "embed-user-4d2", "embed-Pa55-8e1"
	addr := closedAddr(t)
	c := DefaultConfig()
	c.Kind, c.URL, c.Model = KindOpenAI, "http://"+user+":"+password+"@"+addr+"/v1", "m"
	o := newTestOpenAI(t, c)
	_, err := o.Embed(context.Background(), "x")
	if err == nil || !strings.Contains(err.Error(), "xxxxx@"+addr) {
		t.Fatalf("want an error naming the masked URL, got %v", err)
	}
	errs := []error{err}
	for _, bad := range []string{"ftp://" + user + ":" + password + "@" + addr, "http://" + user + ":" + password + "@" + addr + ":x/v1"} {
		c.URL = bad
		if err := c.Validate(); err == nil {
			t.Fatalf("Validate(%q) passed", bad)
		} else {
			errs = append(errs, err)
		}
	}
	for _, err := range errs {
		if strings.Contains(err.Error(), password) || strings.Contains(err.Error(), user) {
			t.Errorf("error leaks the URL's credentials: %v", err)
		}
	}
}
