package adapters

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// Codes of a request body refused before anything reads it. The last three
// are JSON to a lenient reader, but not I-JSON (RFC 7493), and two readers
// may take them to mean different things.
const (
	CodeInvalidJSON   = "invalid_json"           // not JSON
	CodeDuplicateKey  = "duplicate_key"          // a key twice in one object
	CodeInvalidUTF8   = "invalid_utf8"           // bytes that are not UTF-8
	CodeInvalidEscape = "invalid_unicode_escape" // a \u escape of a lone UTF-16 surrogate
)

// invalidBody describes why body is not I-JSON, naming the place as a
// parameter path (messages[0].content). It reads the body again, token by
// token: only a refused request pays for it.
func invalidBody(body []byte) *APIError {
	d := jsontext.NewDecoder(bytes.NewReader(body))
	err := readOneValue(d)
	var se *jsontext.SyntacticError
	switch {
	case err == io.EOF:
		return &APIError{Status: 400, Type: TypeInvalidRequest, Code: CodeInvalidJSON, Message: "invalid JSON body: the body is empty"}
	case !errors.As(err, &se):
		return &APIError{Status: 400, Type: TypeInvalidRequest, Code: CodeInvalidJSON, Message: "invalid JSON body: more data after the top-level value"}
	}
	if errors.Is(se.Err, jsontext.ErrDuplicateName) {
		where := "the request body"
		if parent := paramPath(d, se.JSONPointer.Parent()); parent != "" {
			where = parent
		}
		return &APIError{Status: 400, Type: TypeInvalidRequest, Code: CodeDuplicateKey, Param: paramPath(d, se.JSONPointer),
			Message: "invalid JSON body: duplicate key " + strconv.Quote(shorten(se.JSONPointer.LastToken())) + " in " + where +
				": a key may appear once in an object"}
	}
	e := &APIError{Status: 400, Type: TypeInvalidRequest, Code: CodeInvalidJSON, Param: paramPath(d, se.JSONPointer)}
	what, hint := se.Err.Error(), ""
	if off := se.ByteOffset; off >= 0 && off < int64(len(body)) {
		// The offset is where the bad bytes start.
		switch rest := body[off:]; {
		case isSurrogateEscape(rest):
			e.Code, what = CodeInvalidEscape, "lone UTF-16 surrogate escape "+string(rest[:6])
			hint = `; \uD800 to \uDFFF escapes must come as a high and low pair`
		case !utf8.FullRune(rest) || startsInvalidRune(rest):
			e.Code, what = CodeInvalidUTF8, "invalid UTF-8"
		}
	}
	e.Message = "invalid JSON body: " + what
	if e.Param != "" {
		e.Message += " in " + e.Param
	}
	e.Message += " (byte offset " + strconv.FormatInt(se.ByteOffset, 10) + ")" + hint
	return e
}

// readOneValue reads one top-level value and the end of input after it.
func readOneValue(d *jsontext.Decoder) error {
	for {
		if _, err := d.ReadToken(); err != nil {
			return err
		}
		if d.StackDepth() == 0 {
			break
		}
	}
	_, err := d.ReadToken()
	if err == io.EOF {
		return nil // not reached: the body was invalid
	}
	if err == nil {
		err = errors.New("more data after the top-level value")
	}
	return err
}

func isSurrogateEscape(b []byte) bool {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return false
	}
	n, err := strconv.ParseUint(string(b[2:6]), 16, 16)
	return err == nil && n >= 0xD800 && n <= 0xDFFF
}

func startsInvalidRune(b []byte) bool {
	r, size := utf8.DecodeRune(b)
	return r == utf8.RuneError && size <= 1
}

// paramPath renders a JSON pointer as the parameter paths of the other
// request errors (messages[0].content). A pointer does not say whether a
// token is an array index or an object key; d, stopped at the error, knows
// the kind of each level above it.
func paramPath(d *jsontext.Decoder, p jsontext.Pointer) string {
	var b strings.Builder
	level := 0
	for tok := range p.Tokens() {
		level++
		kind := jsontext.Kind('{')
		if level <= d.StackDepth() {
			kind, _ = d.StackIndex(level)
		}
		switch {
		case kind == '[':
			b.WriteString("[" + tok + "]")
		case plainKey(tok):
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(tok)
		default:
			b.WriteString("[" + strconv.Quote(shorten(tok)) + "]")
		}
	}
	return b.String()
}

func plainKey(k string) bool {
	if k == "" || len(k) > 64 {
		return false
	}
	for _, c := range []byte(k) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// shorten cuts a client's key to 64 bytes, on a rune boundary, for an
// error message.
func shorten(s string) string {
	if len(s) <= 64 {
		return s
	}
	cut := 64
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
