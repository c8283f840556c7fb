package adapters

import (
	"bytes"
	"errors"
)

// CheckRequestFraming looks at a request's header block as received (raw
// lines, before any unfolding) for what makes its body length ambiguous
// between two HTTP parsers, which is how requests are smuggled past a
// proxy in front: a Transfer-Encoding other than a single chunked, both
// Transfer-Encoding and Content-Length (RFC 9112 §6.1, §6.3), or a
// Transfer-Encoding or Content-Length folded over lines (obs-fold, §5.2).
// The server's parser accepts these (it treats identity as no body, answers
// both-headers requests before closing, and unfolds), so the gateway
// refuses them itself, with a 400 and a close. A Trailer field is refused
// too: it announces fields after the body, which the gateway never takes
// (ErrTrailerFields), and says so before the body is sent.
func CheckRequestFraming(raw []byte) error {
	var cl, te, framingLine bool
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) == 0 {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			if framingLine {
				return errFoldedFraming
			}
			continue
		}
		name, value, _ := bytes.Cut(line, []byte{':'})
		framingLine = false
		switch {
		case asciiEqualFold(name, "content-length"):
			cl, framingLine = true, true
		case asciiEqualFold(name, "transfer-encoding"):
			if te || !asciiEqualFold(bytes.Trim(value, " \t"), "chunked") {
				return errTransferEncoding
			}
			te, framingLine = true, true
		case asciiEqualFold(name, "trailer"):
			return errTrailerAnnounced
		}
	}
	if cl && te {
		return errBothLengths
	}
	return nil
}

var (
	errFoldedFraming    = errors.New("malformed HTTP request: Content-Length or Transfer-Encoding folded over lines")
	errTransferEncoding = errors.New("malformed HTTP request: the only Transfer-Encoding accepted is a single chunked")
	errBothLengths      = errors.New("malformed HTTP request: both Content-Length and Transfer-Encoding")
	errTrailerAnnounced = errors.New("malformed HTTP request: a Trailer header announces fields after the body, which are not accepted; send them as headers")
)

// ErrTrailerFields refuses a chunked request that sent fields after its
// body. The server's parser files them with the headers, where they would
// pass for headers a proxy in front checked or stripped (X-Cache-Only,
// Cache-Control, X-Frontdoor-Tenant), so the gateway refuses the request,
// with a 400 and a close, before it reads any header. No OpenAI SDK, nor
// curl, sends request trailers.
var ErrTrailerFields = errors.New("malformed HTTP request: fields after a chunked body (trailers) are not accepted; send them as headers")

// asciiEqualFold compares b and the lower-case ASCII s, ignoring case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
