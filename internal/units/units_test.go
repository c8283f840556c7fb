package units

import (
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestBytesAndDuration(t *testing.T) {
	var v struct {
		Size Bytes    `yaml:"size"`
		Wait Duration `yaml:"wait"`
	}
	cases := []struct {
		in   string
		size Bytes
		wait time.Duration
	}{
		{"size: 512MiB\nwait: 50ms", 512 << 20, 50 * time.Millisecond},
		{"size: 1GB\nwait: 10m", 1e9, 10 * time.Minute},
		{"size: 8388608\nwait: 0", 8388608, 0},
	}
	for _, c := range cases {
		if err := yaml.Unmarshal([]byte(c.in), &v); err != nil {
			t.Fatalf("%q: %v", c.in, err)
		}
		if v.Size != c.size || v.Wait.D() != c.wait {
			t.Fatalf("%q: got %d %v", c.in, v.Size, v.Wait)
		}
	}
	for _, bad := range []string{"size: lots", "size: -3MiB", "wait: soon", "wait: 5"} {
		if err := yaml.Unmarshal([]byte(bad), &v); err == nil {
			t.Fatalf("%q: expected an error", bad)
		}
	}
}
