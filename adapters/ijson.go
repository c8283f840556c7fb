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

// BodyLimits bound what one request body may hold, so that a body well
// under limits.max_body_bytes cannot make the gateway build a tree of
// millions of values. Zero fields take their defaults.
type BodyLimits struct {
	MaxMessages     int // chat messages, or a Responses request's input items
	MaxContentParts int // content parts of one message
	MaxTokenIDs     int // items of one token array (embeddings input, completions prompt)
}

// Defaults of BodyLimits: far above what real clients send (OpenAI's
// embeddings take 8192 tokens per input; long-context models take prompts
// of 128k tokens; long agent sessions send hundreds of messages).
const (
	DefaultMaxMessages     = 10000
	DefaultMaxContentParts = 1000
	DefaultMaxTokenIDs     = 131072
)

func (l BodyLimits) orDefaults() BodyLimits {
	if l.MaxMessages <= 0 {
		l.MaxMessages = DefaultMaxMessages
	}
	if l.MaxContentParts <= 0 {
		l.MaxContentParts = DefaultMaxContentParts
	}
	if l.MaxTokenIDs <= 0 {
		l.MaxTokenIDs = DefaultMaxTokenIDs
	}
	return l
}

// ParseGate admits the parse of a body by its estimated memory cost (see
// ParseCost): the tree is built only once AcquireParse returns nil, and
// ReleaseParse gives the cost back when the request is released.
type ParseGate interface {
	AcquireParse(cost int64) *APIError
	ReleaseParse(cost int64)
}

// ParseOptions are the bounds and the gate of a parse.
type ParseOptions struct {
	Limits BodyLimits
	Gate   ParseGate // nil: none
}

// Parse cost: a fastjson tree takes about costPerValue bytes per value or
// object member (an 80-byte Value, its pointer or member entry, and the
// slack of growing slices); ParseCostPerByte covers the copies of the body
// made while the request lives (the parser's, the cache key's canonical
// form, the semantic query, the upstream request's buffer).
const (
	costPerValue     = 128
	ParseCostPerByte = 4
)

// maxPooledCost is the largest parse whose parser goes back to the pool:
// a parser keeps its copy of the body and its values, so a pooled parser
// that once read a large body would hold that memory for good.
const maxPooledCost = 1 << 20

// bodyShape is what scanBody found in a body.
type bodyShape struct {
	values int // values and object members
}

// cost is the estimated memory of parsing a body of n bytes of this shape.
func (s bodyShape) cost(n int) int64 {
	return int64(n)*ParseCostPerByte + int64(s.values)*costPerValue
}

// scanBody reads a body that is valid JSON once, without building a tree:
// it counts its values and refuses an array over ep's bounds before the
// parser spends the memory (the validation after the parse checks the
// same bounds again, for keys spelled with escapes). Bounded arrays are
// chat's messages and messages[i].content, a Responses request's input and
// input[i].content (of a message item only), a completion's prompt and
// prompt[i], and an embeddings request's input and input[i].
func scanBody(ep Endpoint, body []byte, lim BodyLimits) (bodyShape, *APIError) {
	var stack [4]scanFrame // the bounded arrays are at most 4 deep; deeper levels are only counted
	depth := 0             // levels open
	var shape bodyShape
	// valueStarts counts a value at the current level (an array item).
	valueStarts := func() *APIError {
		shape.values++
		if depth == 0 || depth > len(stack) {
			return nil
		}
		f := &stack[depth-1]
		if !f.array || !f.awaiting {
			return nil
		}
		f.awaiting = false
		f.count++
		if max := arrayBound(ep, stack[:depth], lim); max > 0 && f.count > max {
			e := tooMany(boundParam(stack[:depth]), max)
			if ep != EndpointResponses || depth != 4 {
				return e
			}
			// Only a message's content is bounded, and the item's type
			// may come after it: refused when the item closes.
			if item := &stack[2]; item.pending == nil {
				item.pending = e
			}
		}
		return nil
	}
	for i := 0; i < len(body); i++ {
		switch c := body[i]; c {
		case '"':
			end := stringEnd(body, i+1)
			if depth > 0 && depth <= len(stack) && !stack[depth-1].array {
				if f := &stack[depth-1]; f.awaiting { // a key
					f.key, f.awaiting = body[i+1:end], false
					f.escapedKey = f.escapedKey || bytes.IndexByte(f.key, '\\') >= 0
					shape.values++
					i = end
					continue
				} else if string(f.key) == "type" && end > i+1 {
					f.typ = body[i+1 : end]
				}
			}
			if e := valueStarts(); e != nil {
				return shape, e
			}
			i = end
		case '{', '[':
			if e := valueStarts(); e != nil {
				return shape, e
			}
			depth++
			if depth <= len(stack) {
				stack[depth-1] = scanFrame{array: c == '[', awaiting: true}
			}
		case '}', ']':
			if depth == 3 && stack[2].pending != nil && stack[2].isMessage() {
				return shape, stack[2].pending
			}
			depth--
		case ',':
			if depth > 0 && depth <= len(stack) {
				stack[depth-1].awaiting = true
			}
		case ':', ' ', '\t', '\r', '\n':
		default: // a number, true, false or null: skip to its end
			if e := valueStarts(); e != nil {
				return shape, e
			}
			for i+1 < len(body) && !isDelim(body[i+1]) {
				i++
			}
		}
	}
	return shape, nil
}

// scanFrame is one open level of scanBody.
type scanFrame struct {
	array    bool
	awaiting bool   // array: before its next value; object: before its next key
	count    int    // array: values so far
	key      []byte // object: the current member's key, raw
	// A Responses input item: its content over its bound, refused when
	// the item closes as a message; its "type" string, raw; whether a key
	// was spelled with an escape (it may be "type").
	pending    *APIError
	typ        []byte
	escapedKey bool
}

// isMessage reports whether a closed Responses input item is one whose
// content validation bounds: of type "message", or of no type at all.
func (f *scanFrame) isMessage() bool {
	if f.typ != nil {
		return string(f.typ) == "message"
	}
	return !f.escapedKey
}

// stringEnd is the index of the quote that closes the string whose
// contents start at body[from] (valid JSON: there is one).
func stringEnd(body []byte, from int) int {
	for {
		j := bytes.IndexByte(body[from:], '"')
		if j < 0 {
			return len(body) - 1
		}
		end := from + j
		backslashes := 0
		for k := end - 1; k >= from && body[k] == '\\'; k-- {
			backslashes++
		}
		if backslashes%2 == 0 {
			return end
		}
		from = end + 1
	}
}

func isDelim(c byte) bool {
	switch c {
	case ',', ']', '}', ' ', '\t', '\r', '\n':
		return true
	}
	return false
}

// arrayBound is the most items the innermost array of open (the levels
// from the root object down to that array) may hold for ep; 0 when it is
// not bounded here.
func arrayBound(ep Endpoint, open []scanFrame, lim BodyLimits) int {
	if len(open) < 2 || open[0].array {
		return 0
	}
	top := open[0].key
	switch len(open) {
	case 2: // a top-level field's array
		switch {
		case ep == EndpointChat && string(top) == "messages", ep == EndpointResponses && string(top) == "input":
			return lim.MaxMessages
		case ep == EndpointCompletion && string(top) == "prompt":
			return lim.MaxTokenIDs
		case ep == EndpointEmbeddings && string(top) == "input":
			return max(lim.MaxTokenIDs, MaxEmbeddingInputs)
		}
	case 3: // an array in a top-level array: a token array
		if open[1].array && (ep == EndpointCompletion && string(top) == "prompt" || ep == EndpointEmbeddings && string(top) == "input") {
			return lim.MaxTokenIDs
		}
	case 4: // a message's content parts
		if open[1].array && !open[2].array && string(open[2].key) == "content" &&
			(ep == EndpointChat && string(top) == "messages" || ep == EndpointResponses && string(top) == "input") {
			return lim.MaxContentParts
		}
	}
	return 0
}

// boundParam is the parameter path of the array arrayBound bounded.
func boundParam(open []scanFrame) string {
	p := string(open[0].key)
	if len(open) >= 3 {
		p += "[" + strconv.Itoa(open[1].count-1) + "]"
	}
	if len(open) == 4 {
		p += ".content"
	}
	return p
}

// tooMany is the error for an array of param over its bound of max items.
func tooMany(param string, max int) *APIError {
	return BadRequest(param, param+" holds more than "+strconv.Itoa(max)+" items, the most this gateway accepts")
}
