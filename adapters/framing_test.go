package adapters

import (
	"strings"
	"testing"
)

// FuzzCheckRequestFraming holds CheckRequestFraming to a plain reading of
// its rules over any header block: it refuses exactly the blocks with a
// Trailer field, a Transfer-Encoding other than one single chunked, both
// lengths, or a continuation line right after a length field; and it never
// panics.
func FuzzCheckRequestFraming(f *testing.F) {
	for _, s := range []string{
		"Host: x\r\nContent-Length: 5\r\n",
		"Host: x\r\nTransfer-Encoding: chunked\r\n",
		"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
		"Transfer-Encoding:\r\n chunked\r\n",
		"Transfer-Encoding: chunked, identity\r\n",
		"TRANSFER-ENCODING:  Chunked \t\r\n",
		"Trailer: X-Cache-Only\r\nTransfer-Encoding: chunked\r\n",
		"trailer:\r\n",
		"X-A: b\r\n c\r\nContent-Length: 1\n",
		"Content-Length: 1\r\n\r\n\tx\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		err := CheckRequestFraming(raw)
		if want := framingOracle(string(raw)); (err != nil) != want {
			t.Fatalf("%q: refused %v (%v), want refused %v", raw, err != nil, err, want)
		}
	})
}

// framingOracle says whether the rules refuse the header block raw.
func framingOracle(raw string) bool {
	lower := func(s string) string { // ASCII only, as HTTP field names are
		return strings.Map(func(r rune) rune {
			if 'A' <= r && r <= 'Z' {
				return r + 'a' - 'A'
			}
			return r
		}, s)
	}
	var cl, te, after bool // after: the last field line was a length field
	for _, line := range strings.Split(raw, "\n") {
		line = strings.TrimSuffix(line, "\r")
		switch {
		case line == "":
		case line[0] == ' ' || line[0] == '\t':
			if after {
				return true
			}
		default:
			name, value, _ := strings.Cut(line, ":")
			name = lower(name)
			after = name == "content-length" || name == "transfer-encoding"
			switch name {
			case "trailer":
				return true
			case "content-length":
				cl = true
			case "transfer-encoding":
				if te || lower(strings.Trim(value, " \t")) != "chunked" {
					return true
				}
				te = true
			}
		}
	}
	return cl && te
}
