package gpusim

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig invalid: %v", err)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero Config (all defaults) invalid: %v", err)
	}
	cases := []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.MaxNumSeqs = -1 }, "max_num_seqs: must be >= 1"},
		{func(c *Config) { c.MaxWaiting = -1 }, "max_waiting:"},
		{func(c *Config) { c.Kind = "triton" }, "kind:"},
		{func(c *Config) { c.TTFT = -time.Second }, "ttft:"},
		{func(c *Config) { c.ITL = -time.Second }, "itl:"},
		{func(c *Config) { c.OutputTokens = -5 }, "output_tokens:"},
		{func(c *Config) { c.Jitter = 1.5 }, "jitter:"},
		{func(c *Config) { c.FailRate = 2 }, "fail_rate:"},
		{func(c *Config) { c.HangRate = -0.1 }, "hang_rate:"},
		{func(c *Config) { c.RPM = -1 }, "rpm:"},
		{func(c *Config) { c.KVCapacityTokens = -1 }, "kv_capacity_tokens:"},
		{func(c *Config) { c.Listen = "nowhere" }, "listen:"},
		{func(c *Config) { c.Models = []string{"a", "a"} }, "models:"},
		{func(c *Config) { c.Models = []string{" "} }, "models:"},
	}
	for _, tc := range cases {
		cfg := DefaultConfig()
		tc.mutate(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want error containing %q, got %v", tc.want, err)
		}
		if _, nerr := New(cfg); nerr == nil {
			t.Errorf("New accepted a config with %q", tc.want)
		}
	}
}

// TestJitter checks jitter stays within ±Jitter and actually varies.
func TestJitter(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Jitter = 0.2
	cfg.Seed = 42
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	seen := make(map[time.Duration]bool)
	for range 200 {
		d := s.jittered(100 * time.Millisecond)
		if d < 80*time.Millisecond || d > 120*time.Millisecond {
			t.Fatalf("jittered 100ms to %v", d)
		}
		seen[d] = true
	}
	if len(seen) < 50 {
		t.Fatalf("only %d distinct jittered values", len(seen))
	}
	if s.jittered(0) != 0 {
		t.Fatal("zero delay jittered")
	}
}

// TestStartAddr checks Start binds port 0 and reports a 127.0.0.1 address
// even when listening on all interfaces.
func TestStartAddr(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Listen = ":0"
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.Addr() != "" {
		t.Fatal("Addr before Start")
	}
	addr, err := s.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	if !strings.HasPrefix(addr, "127.0.0.1:") || addr == "127.0.0.1:0" || s.Addr() != addr || s.URL() != "http://"+addr {
		t.Fatalf("addr %q URL %q", addr, s.URL())
	}
	resp, err := http.Get(s.URL() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, err := s.Start(); err == nil {
		t.Fatal("second Start succeeded")
	}
}
