package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/valyala/fastjson"
)

// Keys are the cache keys of one request.
type Keys struct {
	// Exact is the hash of the canonical request: namespace, endpoint, model
	// and every field that changes the output.
	Exact string
	// Scope is the hash of the same form with the last user turn's text left
	// out; "" when the request has no text-only last user turn (semantic
	// lookups are then skipped).
	Scope string
	// Query is the text of the last user turn, what the semantic lookup
	// embeds.
	Query string
}

// Fields that never change the output, so they are not part of the key:
// streaming is a transport choice, and user is an end-user id for abuse
// monitoring (unless KeyOptions.ByUser).
var ignoredFields = map[string]bool{"stream": true, "stream_options": true, "model": true, "user": true}

// KeyOptions are the switches of the key (cache.key_by_user).
type KeyOptions struct {
	// ByUser makes the request's user field part of the exact key and of
	// the semantic scope: two end users never share an entry. Requests
	// with no user (or "") share theirs, keyed as without the switch.
	ByUser bool
}

// KeyOptions returns the key switches of the section.
func (c *Config) KeyOptions() KeyOptions { return KeyOptions{ByUser: c.KeyByUser} }

// specDefaults are the values the OpenAI API documents as defaults: a field
// sent with its default equals the field left out. null always equals absent.
var specDefaults = map[string]string{
	"temperature": "n1", "top_p": "n1", "n": "n1", "best_of": "n1",
	"presence_penalty": "n0", "frequency_penalty": "n0",
	"logprobs": "f", "echo": "f", "store": "f", "parallel_tool_calls": "t",
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// ComputeKeys derives the exact key and the semantic scope of a request.
// model is the resolved model (after alias resolution); endpoint names the
// API ("chat" or "completion"); root is the request's JSON object, with no
// duplicate keys (adapters.ParseRequest refuses them: the key must read
// the request as the engine does).
func ComputeKeys(namespace, model, endpoint string, root *fastjson.Value, opt KeyOptions) Keys {
	k := Keys{Exact: ExactKey(namespace, model, endpoint, root, opt)}
	k.Scope, k.Query = SemanticScope(namespace, model, endpoint, root, opt)
	return k
}

// ExactKey is the hash of the canonical request.
func ExactKey(namespace, model, endpoint string, root *fastjson.Value, opt KeyOptions) string {
	return canonicalHash(namespace, model, endpoint, root, -1, opt)
}

// SemanticScope is the hash of the canonical request without the text of
// the last user turn, and that text. Both are "" when the request has no
// text-only last user turn (chat and responses only). For the Responses
// API ("responses") the turns are the input items, and a string input is
// the user turn itself; the instructions stay in the scope, as a chat's
// system prompt does.
func SemanticScope(namespace, model, endpoint string, root *fastjson.Value, opt KeyOptions) (scope, query string) {
	var i int
	var ok bool
	switch endpoint {
	case "chat":
		i, query, ok = lastUserTurn(root.GetArray("messages"), "text")
	case "responses":
		if in := root.Get("input"); in != nil && in.Type() == fastjson.TypeString {
			i, query, ok = skipWhole, string(in.GetStringBytes()), true
		} else {
			i, query, ok = lastUserTurn(root.GetArray("input"), "input_text")
		}
	}
	if !ok {
		return "", ""
	}
	return canonicalHash(namespace, model, endpoint, root, i, opt), query
}

// skipWhole, as the turn to leave out, leaves out the whole input: a
// Responses request's string input.
const skipWhole = -2

func canonicalHash(namespace, model, endpoint string, root *fastjson.Value, skipMessage int, opt KeyOptions) string {
	obj, err := root.Object()
	if err != nil {
		return ""
	}
	bp := bufPool.Get().(*[]byte)
	b := (*bp)[:0]
	b = append(b, "frontdoor-cache-v1\x00"...)
	b = appendStr(b, namespace)
	b = appendStr(b, endpoint)
	b = appendStr(b, model)
	b = appendTopLevel(b, obj, endpoint, skipMessage, opt, nil)
	sum := sha256.Sum256(b)
	*bp = b
	putBuf(bp)
	return hex.EncodeToString(sum[:16])
}

// lastUserTurn finds the last message with role user whose content is text
// only (a string, or parts of type textType), and returns its index and
// text.
func lastUserTurn(msgs []*fastjson.Value, textType string) (int, string, bool) {
	for i := len(msgs) - 1; i >= 0; i-- {
		if string(msgs[i].GetStringBytes("role")) != "user" {
			continue
		}
		if t := msgs[i].Get("type"); t != nil && string(t.GetStringBytes()) != "message" {
			continue // a Responses item that is not a message
		}
		c := msgs[i].Get("content")
		if c == nil {
			return 0, "", false
		}
		switch c.Type() {
		case fastjson.TypeString:
			return i, string(c.GetStringBytes()), true
		case fastjson.TypeArray:
			var sb strings.Builder
			for j, part := range c.GetArray() {
				if string(part.GetStringBytes("type")) != textType {
					return 0, "", false
				}
				if j > 0 {
					sb.WriteByte('\n')
				}
				sb.Write(part.GetStringBytes("text"))
			}
			return i, sb.String(), true
		}
		return 0, "", false
	}
	return 0, "", false
}

// appendTopLevel writes the canonical form of a request's top-level
// fields for endpoint, leaving out those that never change the output and
// those in skip.
func appendTopLevel(b []byte, obj *fastjson.Object, endpoint string, skipMessage int, opt KeyOptions, skip map[string]bool) []byte {
	fields := make([]member, 0, 16)
	maxTokens := int64(-1)
	turns := "messages"
	if endpoint == "responses" {
		turns = "input"
	}
	obj.Visit(func(key []byte, v *fastjson.Value) {
		k := keyString(key)
		if k == "store" && endpoint == "responses" {
			return // whether the node keeps the answer does not change it
		}
		if k == "user" && opt.ByUser {
			if len(v.GetStringBytes()) > 0 {
				fields = append(fields, member{k, v})
			}
			return
		}
		if ignoredFields[k] || skip[k] || v.Type() == fastjson.TypeNull {
			return
		}
		if k == "max_tokens" || k == "max_completion_tokens" {
			// Synonyms: the effective limit is the smaller one.
			if f, err := v.Float64(); err == nil && f >= 0 && (maxTokens < 0 || int64(f) < maxTokens) {
				maxTokens = int64(f)
			}
			return
		}
		if def, ok := specDefaults[k]; ok && string(appendValue(nil, v)) == def {
			return
		}
		fields = append(fields, member{k, v})
	})
	sortMembers(fields)
	b = append(b, '{')
	if maxTokens >= 0 {
		b = appendStr(b, "max_tokens")
		b = append(b, 'n')
		b = strconv.AppendInt(b, maxTokens, 10)
	}
	for _, f := range fields {
		b = appendStr(b, f.k)
		switch {
		case f.k == turns && skipMessage >= 0:
			b = appendMessagesWithout(b, f.v, skipMessage)
			continue
		case f.k == turns && skipMessage == skipWhole:
			b = append(b, 'Q')
			continue
		}
		b = appendValue(b, f.v)
	}
	return append(b, '}')
}

// appendMessagesWithout writes the messages with the content of one left out.
func appendMessagesWithout(b []byte, msgs *fastjson.Value, skip int) []byte {
	b = append(b, '[')
	for i, m := range msgs.GetArray() {
		if i != skip {
			b = appendValue(b, m)
			continue
		}
		o, _ := m.Object()
		b = append(b, "{Q"...)
		for _, f := range sortedMembers(o) {
			if f.k != "content" {
				b = appendStr(b, f.k)
				b = appendValue(b, f.v)
			}
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendValue writes an unambiguous canonical form: objects with sorted
// keys, strings length-prefixed, numbers by value (0.7 == 0.70, 1 == 1.0).
func appendValue(b []byte, v *fastjson.Value) []byte {
	switch v.Type() {
	case fastjson.TypeObject:
		o, _ := v.Object()
		b = append(b, '{')
		for _, f := range sortedMembers(o) {
			b = appendStr(b, f.k)
			b = appendValue(b, f.v)
		}
		return append(b, '}')
	case fastjson.TypeArray:
		b = append(b, '[')
		for _, e := range v.GetArray() {
			b = appendValue(b, e)
		}
		return append(b, ']')
	case fastjson.TypeString:
		return appendStrBytes(b, v.GetStringBytes()) // no copy of a long string
	case fastjson.TypeNumber:
		b = append(b, 'n')
		if i, err := v.Int64(); err == nil {
			return strconv.AppendInt(b, i, 10)
		}
		// fastjson's float parser rounds 7e-1 to 0.7000000000000001; strconv
		// is exact, so 0.7, 0.70 and 7e-1 agree.
		var raw [32]byte
		f, err := strconv.ParseFloat(string(v.MarshalTo(raw[:0])), 64)
		if err != nil {
			f, _ = v.Float64()
		}
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return strconv.AppendInt(b, int64(f), 10)
		}
		return strconv.AppendFloat(b, f, 'g', -1, 64)
	case fastjson.TypeTrue:
		return append(b, 't')
	case fastjson.TypeFalse:
		return append(b, 'f')
	default:
		return append(b, 'z')
	}
}

// member is one key and value of an object.
type member struct {
	k string
	v *fastjson.Value
}

// sortedMembers returns o's members sorted by key. Each value is the one
// beside its key, not o.Get(key): that would cost a scan of o per key
// (quadratic: seconds for an object of 50,000 keys) and read the first of
// duplicate keys.
func sortedMembers(o *fastjson.Object) []member {
	ms := make([]member, 0, o.Len())
	o.Visit(func(k []byte, v *fastjson.Value) { ms = append(ms, member{keyString(k), v}) })
	sortMembers(ms)
	return ms
}

// keyString is a key Visit gives as bytes, as the string fastjson holds it
// (Visit makes the bytes of its string without a copy): no allocation per
// key. The tree is not changed while a key is computed.
func keyString(k []byte) string { return unsafe.String(unsafe.SliceData(k), len(k)) }

func sortMembers(ms []member) {
	slices.SortStableFunc(ms, func(a, b member) int { return strings.Compare(a.k, b.k) })
}

func appendStr(b []byte, s string) []byte {
	b = append(b, 's')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

func appendStrBytes(b []byte, s []byte) []byte {
	b = append(b, 's')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

// maxPooledBuf is the largest canonical-form buffer kept in bufPool: one
// grown by a long prompt goes to the collector, not into the pool for good.
const maxPooledBuf = 64 << 10

func putBuf(bp *[]byte) {
	if cap(*bp) <= maxPooledBuf {
		bufPool.Put(bp)
	}
}
