package embed

import (
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"frontdoor/internal/units"
)

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	want := Config{
		Kind: KindLocal, Dims: 512, Timeout: units.Duration(2 * time.Second),
		BatchSize: 32, BatchWait: units.Duration(2 * time.Millisecond), MemoEntries: 4096, MaxInputBytes: 32 << 10,
	}
	if c != want {
		t.Fatalf("DefaultConfig() = %+v, want %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
}

func TestValidateFillsZeroFields(t *testing.T) {
	var c Config
	if err := c.Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	if c != DefaultConfig() {
		t.Fatalf("zero config validated to %+v, want the defaults %+v", c, DefaultConfig())
	}
}

func TestValidateErrors(t *testing.T) {
	openai := func(mod func(*Config)) Config {
		c := DefaultConfig()
		c.Kind, c.URL, c.Model = KindOpenAI, "http://127.0.0.1:8000/v1", "m"
		mod(&c)
		return c
	}
	local := func(mod func(*Config)) Config {
		c := DefaultConfig()
		mod(&c)
		return c
	}
	tests := []struct {
		name    string
		cfg     Config
		wantKey string // "" means valid
	}{
		{"openai ok", openai(func(*Config) {}), ""},
		{"https ok", openai(func(c *Config) { c.URL = "https://dashscope.example/compatible-mode/v1" }), ""},
		{"bad kind", local(func(c *Config) { c.Kind = "bert" }), "kind:"},
		{"dims low", local(func(c *Config) { c.Dims = 4 }), "dims:"},
		{"dims high", local(func(c *Config) { c.Dims = 10000 }), "dims:"},
		{"negative timeout", local(func(c *Config) { c.Timeout = -1 }), "timeout:"},
		{"batch size negative", local(func(c *Config) { c.BatchSize = -1 }), "batch_size:"},
		{"batch size huge", local(func(c *Config) { c.BatchSize = 100000 }), "batch_size:"},
		{"batch wait long", local(func(c *Config) { c.BatchWait = units.Duration(2 * time.Second) }), "batch_wait:"},
		{"memo negative", local(func(c *Config) { c.MemoEntries = -5 }), "memo_entries:"},
		{"openai no url", openai(func(c *Config) { c.URL = "" }), "url:"},
		{"openai no scheme", openai(func(c *Config) { c.URL = "127.0.0.1:8000/v1" }), "url:"},
		{"openai ftp", openai(func(c *Config) { c.URL = "ftp://host/v1" }), "url:"},
		{"openai no host", openai(func(c *Config) { c.URL = "http:///v1" }), "url:"},
		{"openai no model", openai(func(c *Config) { c.Model = "" }), "model:"},
		{"local ignores url", local(func(c *Config) { c.URL = "" }), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.wantKey == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error starting %q", tc.wantKey)
			}
			if !strings.HasPrefix(err.Error(), tc.wantKey) {
				t.Fatalf("Validate() = %q, want it to start with %q", err, tc.wantKey)
			}
		})
	}
}

func TestConfigFromYAML(t *testing.T) {
	c := DefaultConfig()
	src := "kind: openai\nurl: http://127.0.0.1:8000/v1\nmodel: bge-m3\napi_key_env: EMBED_KEY\ndims: 1024\ntimeout: 500ms\nbatch_size: 16\nbatch_wait: 5ms\nmemo_entries: 100\n"
	if err := yaml.Unmarshal([]byte(src), &c); err != nil {
		t.Fatal(err)
	}
	want := Config{
		Kind: KindOpenAI, URL: "http://127.0.0.1:8000/v1", Model: "bge-m3", APIKeyEnv: "EMBED_KEY",
		Dims: 1024, Timeout: units.Duration(500 * time.Millisecond), BatchSize: 16,
		BatchWait: units.Duration(5 * time.Millisecond), MemoEntries: 100, MaxInputBytes: DefaultMaxInputBytes,
	}
	if c != want {
		t.Fatalf("got %+v, want %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestNewPicksKind(t *testing.T) {
	e, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := e.(*Local); !ok || e.Name() != "local-512" || e.Dims() != 512 {
		t.Fatalf("New(default) = %T %s/%d, want *Local local-512", e, e.Name(), e.Dims())
	}

	c := DefaultConfig()
	c.Kind, c.URL, c.Model, c.Dims = KindOpenAI, "http://127.0.0.1:1/v1", "text-embedding-v4", 1024
	e, err = New(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := e.(*OpenAI); !ok || e.Name() != "openai:text-embedding-v4" || e.Dims() != 1024 {
		t.Fatalf("New(openai) = %T %s/%d", e, e.Name(), e.Dims())
	}

	c.URL = ""
	if _, err := New(c); err == nil || !strings.Contains(err.Error(), "url:") {
		t.Fatalf("New with no url: err = %v, want a url: error", err)
	}
}

func TestCosine(t *testing.T) {
	a := []float32{0.6, 0.8, 0}
	b := []float32{0.8, 0.6, 0}
	if got := Cosine(a, a); abs32(got-1) > 1e-6 {
		t.Errorf("Cosine(a, a) = %v, want 1", got)
	}
	if got := Cosine(a, b); abs32(got-0.96) > 1e-6 {
		t.Errorf("Cosine(a, b) = %v, want 0.96", got)
	}
	if got := Cosine(a, []float32{1, 0}); got != 0 {
		t.Errorf("Cosine of different lengths = %v, want 0", got)
	}
	if got := Cosine(nil, nil); got != 0 {
		t.Errorf("Cosine(nil, nil) = %v, want 0", got)
	}
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}
