package gpusim

import (
	"strings"

	"github.com/valyala/fastjson"
)

// vocab is the fixed token vocabulary: 256 plain lower-case English words,
// so a token is picked with one byte of PRNG output and never needs JSON
// escaping.
var vocab = [256]string{
	"the", "of", "and", "to", "in", "is", "it", "that", "was", "for", "on", "are",
	"as", "with", "his", "they", "at", "be", "this", "from", "have", "or", "by", "one",
	"had", "not", "but", "what", "all", "were", "when", "we", "there", "can", "an", "your",
	"which", "their", "said", "if", "do", "will", "each", "about", "how", "up", "out", "them",
	"then", "she", "many", "some", "so", "these", "would", "other", "into", "has", "more", "her",
	"two", "like", "him", "see", "time", "could", "no", "make", "than", "first", "been", "its",
	"who", "now", "people", "my", "made", "over", "did", "down", "only", "way", "find", "use",
	"may", "water", "long", "little", "very", "after", "words", "called", "just", "where", "most", "know",
	"get", "through", "back", "much", "go", "good", "new", "write", "our", "me", "man", "too",
	"any", "day", "same", "right", "look", "think", "also", "around", "another", "came", "come", "work",
	"three", "word", "must", "because", "does", "part", "even", "place", "well", "such", "here", "take",
	"why", "things", "help", "put", "years", "different", "away", "again", "off", "went", "old", "number",
	"great", "tell", "men", "say", "small", "every", "found", "still", "between", "name", "should", "home",
	"big", "give", "air", "line", "set", "own", "under", "read", "last", "never", "us", "left",
	"end", "along", "while", "might", "next", "sound", "below", "saw", "something", "thought", "both", "few",
	"those", "always", "looked", "show", "large", "often", "together", "asked", "house", "world", "going", "want",
	"school", "important", "until", "form", "food", "keep", "children", "feet", "land", "side", "without", "boy",
	"once", "animals", "life", "enough", "took", "sometimes", "four", "head", "above", "kind", "began", "almost",
	"live", "page", "got", "earth", "need", "far", "hand", "high", "year", "mother", "light", "parts",
	"country", "father", "let", "night", "following", "picture", "being", "study", "second", "eyes", "soon", "times",
	"story", "boys", "since", "white", "days", "ever", "paper", "hard", "near", "sentence", "better", "best",
	"across", "during", "today", "others"}

// FNV-64a parameters.
const (
	fnvOffset uint64 = 14695981039346656037
	fnvPrime  uint64 = 1099511628211
)

func fnvAdd(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return h
}

func fnvAddString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// tokenStream is the deterministic word generator (splitmix64 seeded with
// the FNV-64a hash of the prompt text). With fixed set, every token is that
// word (a judge's answer).
type tokenStream struct {
	state uint64
	fixed string
}

func (t *tokenStream) next() string {
	if t.fixed != "" {
		return t.fixed
	}
	t.state += 0x9e3779b97f4a7c15
	z := t.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return vocab[z>>56]
}

// reasoningSalt derives the reasoning stream's seed from the prompt hash so
// reasoning text differs from the answer.
const reasoningSalt uint64 = 0x5deece66d

// reasoningCount is how many reasoning_content tokens DashScope-mode
// streams emit for a prompt: 3, 4 or 5.
func reasoningCount(h uint64) int { return 3 + int(h%3) }

// appendTokens appends n tokens of stream t: each word followed by a space
// except the last.
func appendTokens(dst []byte, t *tokenStream, n int) []byte {
	for i := 0; i < n; i++ {
		dst = append(dst, t.next()...)
		if i < n-1 {
			dst = append(dst, ' ')
		}
	}
	return dst
}

// ExpectedText is the deterministic output gpusim generates for prompt with
// n tokens (see PromptText for what the prompt text of a request is). A
// streamed response's content deltas concatenate to the same string.
func ExpectedText(prompt string, n int) string {
	if n <= 0 {
		return ""
	}
	t := tokenStream{state: fnvAddString(fnvOffset, prompt)}
	return string(appendTokens(make([]byte, 0, n*6), &t, n))
}

// ExpectedReasoning is the reasoning_content a DashScope-mode stream emits
// for prompt when thinking is enabled (3 to 5 tokens).
func ExpectedReasoning(prompt string) string {
	h := fnvAddString(fnvOffset, prompt)
	t := tokenStream{state: h ^ reasoningSalt}
	return string(appendTokens(nil, &t, reasoningCount(h)))
}

// PromptTokens is gpusim's prompt token estimate for a prompt text:
// (len(bytes)+3)/4, at least 1.
func PromptTokens(prompt string) int { return estimateTokens(len(prompt)) }

func estimateTokens(nbytes int) int { return max(1, (nbytes+3)/4) }

// PromptText returns the text ExpectedText is keyed on for a request body:
// for chat requests ("messages"), every message content (a string, or each
// {"type":"text"} part of an array) joined with "\n"; for completions, the
// "prompt" string, or the strings of a prompt array joined with "\n". It
// returns "" for bodies that are not JSON objects.
func PromptText(body []byte) string {
	v, err := fastjson.ParseBytes(body)
	if err != nil {
		return ""
	}
	var sb strings.Builder
	first := true
	walkPrompt(v, func(part []byte) {
		if !first {
			sb.WriteByte('\n')
		}
		first = false
		sb.Write(part)
	})
	return sb.String()
}

// walkPrompt calls f with each prompt part of a request, in order. A
// Responses request's parts are its instructions, then its input: a
// string, or each input item's content (a string, or the text of each
// part).
func walkPrompt(v *fastjson.Value, f func(part []byte)) {
	if in := v.Get("input"); in != nil && v.Get("messages") == nil {
		if ins := v.Get("instructions"); ins != nil && ins.Type() == fastjson.TypeString {
			f(ins.GetStringBytes())
		}
		if in.Type() == fastjson.TypeString {
			f(in.GetStringBytes())
			return
		}
		items, _ := in.Array()
		for _, it := range items {
			c := it.Get("content")
			if c != nil && c.Type() == fastjson.TypeString {
				f(c.GetStringBytes())
				continue
			}
			parts, _ := c.Array()
			for _, p := range parts {
				if tv := p.Get("text"); tv != nil && tv.Type() == fastjson.TypeString {
					f(tv.GetStringBytes())
				}
			}
		}
		return
	}
	if msgs := v.Get("messages"); msgs != nil {
		arr, _ := msgs.Array()
		for _, m := range arr {
			c := m.Get("content")
			if c == nil {
				continue
			}
			switch c.Type() {
			case fastjson.TypeString:
				f(c.GetStringBytes())
			case fastjson.TypeArray:
				parts, _ := c.Array()
				for _, p := range parts {
					if t := p.GetStringBytes("type"); len(t) > 0 && string(t) != "text" {
						continue
					}
					if tv := p.Get("text"); tv != nil && tv.Type() == fastjson.TypeString {
						f(tv.GetStringBytes())
					}
				}
			}
		}
		return
	}
	p := v.Get("prompt")
	if p == nil {
		return
	}
	switch p.Type() {
	case fastjson.TypeString:
		f(p.GetStringBytes())
	case fastjson.TypeArray:
		arr, _ := p.Array()
		for _, s := range arr {
			if s.Type() == fastjson.TypeString {
				f(s.GetStringBytes())
			}
		}
	}
}

// promptInfo returns the FNV-64a hash and byte length of PromptText(v)
// without building the string.
func promptInfo(v *fastjson.Value) (hash uint64, nbytes int) {
	hash = fnvOffset
	first := true
	walkPrompt(v, func(part []byte) {
		if !first {
			hash = (hash ^ '\n') * fnvPrime
			nbytes++
		}
		first = false
		hash = fnvAdd(hash, part)
		nbytes += len(part)
	})
	return hash, nbytes
}
