package redact

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"http://10.0.0.5:8000/v1", "http://10.0.0.5:8000/v1"},
		{"http://user:s3cret@10.0.0.5:8000/v1", "http://xxxxx@10.0.0.5:8000/v1"},
		{"https://tok3n@api.example/v1?x=1", "https://xxxxx@api.example/v1?x=1"},
		{"http://user:p@ss@host:8000/v1", "http://xxxxx@host:8000/v1"},
		{"http://user:s3cret@host:bad/v1", "http://xxxxx@host:bad/v1"}, // does not parse
		{"http://host/path@v1", "http://host/path@v1"},
		{"", ""},
	} {
		if got := URL(c.in); got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestParseError(t *testing.T) {
	bad := strings.Join([]string{"http://user:s3cret@host", "bad/v1"}, ":") // invalid port
	_, err := url.Parse(bad)
	if err == nil {
		t.Fatal("parsed")
	}
	if msg := ParseError(err).Error(); strings.Contains(msg, "s3cret") || msg == "" {
		t.Fatalf("ParseError = %q", msg)
	}
	if got := ParseError(errors.New("plain")); got.Error() != "plain" {
		t.Fatal(got)
	}
}
