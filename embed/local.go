package embed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer"
)

var _ Embedder = (*Local)(nil)

// Local is a deterministic, offline embedder: it hashes lexical features of
// the text into Dims() signed buckets and L2-normalises the result.
//
// Features, each family scaled to a fixed share of the vector whatever the
// text's length (weight / sqrt(feature count)):
//   - o200k_base tokenizer tokens of the normalised text;
//   - whole words (non-CJK), so rare words split into many tokens still match;
//   - character 3-grams of non-CJK words with word-boundary markers (typos,
//     inflections);
//   - for Chinese, Japanese and Korean runs: character unigrams, bigrams and
//     trigrams, with run-boundary markers on the bigrams.
//
// Text with no features (empty, or punctuation only) embeds to a fixed unit
// vector, so two such texts are identical and match nothing else closely.
//
// Text longer than the input bound (DefaultMaxInputBytes) embeds its first
// and last halves of the bound only, cut at rune boundaries: the cost of an
// embedding stays bounded whatever the prompt. Little is lost: each family
// is scaled by 1/sqrt(count), so a change in the middle of a text that long
// hardly moves its vector anyway. A word longer than maxTokenizedWordLen
// bytes (a run of CJK without punctuation, a base64 blob) goes to the
// tokenizer in pieces of that length, since byte-pair merging costs the
// square of a word's length.
type Local struct {
	dims     int
	maxInput int
	w        featureWeights
}

// DefaultMaxInputBytes is the local embedder's input bound
// (cache.embedder.max_input_bytes).
const DefaultMaxInputBytes = 32 << 10

// featureWeights sets each feature family's share of the vector. The values
// in defaultWeights were tuned on the bench/semantic data (see README.md).
type featureWeights struct {
	Token, Word, Latin3, CJK1, CJK2, CJK3 float64
}

var defaultWeights = featureWeights{
	Token: 1.0, Word: 0.5, Latin3: 0.7,
	CJK1: 0.6, CJK2: 1.0, CJK3: 0.5,
}

// NewLocal returns a local embedder producing vectors of length dims.
// dims below MinDims is raised to MinDims. It starts loading the tokenizer
// vocabulary in the background so that the first Embed rarely waits for it.
func NewLocal(dims int) *Local {
	return NewLocalBounded(dims, DefaultMaxInputBytes)
}

// NewLocalBounded is NewLocal embedding at most maxInput bytes of a text
// (its head and tail; < 1: DefaultMaxInputBytes).
func NewLocalBounded(dims, maxInput int) *Local {
	go o200k()
	if maxInput < 1 {
		maxInput = DefaultMaxInputBytes
	}
	return &Local{dims: max(dims, MinDims), maxInput: maxInput, w: defaultWeights}
}

// headAndTail is text when it fits in maxBytes, else its first and last
// maxBytes/2 bytes (each cut back to a rune boundary) joined by a space.
func headAndTail(text string, maxBytes int) string {
	if len(text) <= maxBytes {
		return text
	}
	half := maxBytes / 2
	head := half
	for head > 0 && !utf8.RuneStart(text[head]) {
		head--
	}
	tail := len(text) - half
	for tail < len(text) && !utf8.RuneStart(text[tail]) {
		tail++
	}
	return text[:head] + " " + text[tail:]
}

// Dims returns the vector length.
func (l *Local) Dims() int { return l.dims }

// Name returns "local-<dims>".
func (l *Local) Name() string { return "local-" + strconv.Itoa(l.dims) }

// Embed returns the text's vector. It never fails and ignores ctx: it is
// pure computation taking tens of microseconds for a question, a few
// milliseconds at the input bound.
func (l *Local) Embed(_ context.Context, text string) ([]float32, error) {
	return l.embed(headAndTail(text, l.maxInput)), nil
}

// Feature family seeds keep equal strings in different families apart.
const (
	seedToken  uint64 = 0x9e3779b97f4a7c15
	seedWord   uint64 = 0xc2b2ae3d27d4eb4f
	seedLatin3 uint64 = 0x165667b19e3779f9
	seedCJK1   uint64 = 0xd6e8feb86659fd93
	seedCJK2   uint64 = 0xa0761d6478bd642f
	seedCJK3   uint64 = 0xe7037ed1a0b428db
	seedEmpty  uint64 = 0x8ebc6af09c88c6e3
)

// Boundary markers for n-grams; private-use code points never occur after
// normalisation turns such runes into separators.
const (
	markStart rune = 0xE000
	markEnd   rune = 0xE001
)

var (
	o200kOnce  sync.Once
	o200kCodec tokenizer.Codec
)

// o200k loads the tokenizer vocabulary once (it takes a fraction of a
// second and tens of MB). It returns nil if the encoding is unavailable, and
// the token family is then skipped.
func o200k() tokenizer.Codec {
	o200kOnce.Do(func() {
		c, err := tokenizer.Get(tokenizer.O200kBase)
		if err == nil {
			o200kCodec = c
		}
	})
	return o200kCodec
}

// scratch holds per-call buffers, reused through a pool.
type scratch struct {
	runes []rune
	text  []byte
	ids   []uint32
	vec   []float64
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func (l *Local) embed(text string) []float32 {
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)

	s.runes = dropPoliteness(normalizeText(s.runes[:0], text))
	if cap(s.vec) < l.dims {
		s.vec = make([]float64, l.dims)
	}
	acc := s.vec[:l.dims]
	clear(acc)

	features := l.addCharFeatures(acc, s.runes)
	features += l.addTokenFeatures(acc, s, s.runes)

	out := make([]float32, l.dims)
	if features == 0 {
		fillEmpty(out)
		return out
	}
	var norm float64
	for _, x := range acc {
		norm += x * x
	}
	if norm == 0 { // every feature cancelled out: vanishingly rare
		fillEmpty(out)
		return out
	}
	inv := 1 / math.Sqrt(norm)
	for i, x := range acc {
		out[i] = float32(x * inv)
	}
	return out
}

// fillEmpty writes the fixed unit vector used for featureless text.
func fillEmpty(out []float32) {
	v := float32(1 / math.Sqrt(float64(len(out))))
	h := seedEmpty
	for i := range out {
		h = mix64(h + uint64(i))
		if h>>63 == 1 {
			out[i] = -v
		} else {
			out[i] = v
		}
	}
}

// addCharFeatures adds the word and character n-gram families and returns
// how many features it added.
func (l *Local) addCharFeatures(acc []float64, runes []rune) int {
	// Count first so that each family gets weight / sqrt(count) whatever
	// the text's length.
	var nWord, nLatin3, nCJK1, nCJK2, nCJK3 int
	forEachWord(runes, func(w []rune, cjk bool) {
		n := len(w)
		if cjk {
			nCJK1 += n
			nCJK2 += n + 1 // with start and end markers
			nCJK3 += max(n-2, 0)
			return
		}
		nWord++
		nLatin3 += n // n+2 padded runes give n 3-grams (the first starts at the word)
	})
	scale := func(w float64, n int) float64 {
		if n == 0 {
			return 0
		}
		return w / math.Sqrt(float64(n))
	}
	sWord, sLatin3 := scale(l.w.Word, nWord), scale(l.w.Latin3, nLatin3)
	sCJK1, sCJK2, sCJK3 := scale(l.w.CJK1, nCJK1), scale(l.w.CJK2, nCJK2), scale(l.w.CJK3, nCJK3)

	dims := len(acc)
	forEachWord(runes, func(w []rune, cjk bool) {
		if cjk {
			prev := markStart
			for i, r := range w {
				add(acc, dims, hashRunes(seedCJK1, r), sCJK1)
				add(acc, dims, hashRunes(seedCJK2, prev, r), sCJK2)
				if i >= 2 {
					add(acc, dims, hashRunes(seedCJK3, w[i-2], w[i-1], r), sCJK3)
				}
				prev = r
			}
			add(acc, dims, hashRunes(seedCJK2, prev, markEnd), sCJK2)
			return
		}
		h := seedWord
		for _, r := range w {
			h = hashStep(h, r)
		}
		add(acc, dims, mix64(h), sWord)
		a, b := markStart, markStart
		for _, c := range w {
			if a != markStart || b != markStart {
				add(acc, dims, hashRunes(seedLatin3, a, b, c), sLatin3)
			}
			a, b = b, c
		}
		add(acc, dims, hashRunes(seedLatin3, a, b, markEnd), sLatin3)
	})
	return nWord + nLatin3 + nCJK1 + nCJK2 + nCJK3
}

// addTokenFeatures adds the tokenizer family and returns how many tokens it added.
func (l *Local) addTokenFeatures(acc []float64, s *scratch, runes []rune) int {
	if l.w.Token == 0 || len(runes) == 0 {
		return 0
	}
	s.ids = s.ids[:0]
	forEachWord(runes, func(w []rune, _ bool) {
		s.text = s.text[:0]
		for _, r := range w {
			s.text = utf8.AppendRune(s.text, r)
		}
		for word := s.text; len(word) > 0; {
			piece := word
			if len(piece) > maxTokenizedWordLen {
				cut := maxTokenizedWordLen
				for !utf8.RuneStart(word[cut]) {
					cut--
				}
				piece = word[:cut]
			}
			word = word[len(piece):]
			if ids, err := wordTokens(piece); err == nil {
				s.ids = append(s.ids, ids...)
			}
		}
	})
	if len(s.ids) == 0 {
		return 0
	}
	scale := l.w.Token / math.Sqrt(float64(len(s.ids)))
	dims := len(acc)
	for _, id := range s.ids {
		add(acc, dims, mix64(seedToken^uint64(id)), scale)
	}
	return len(s.ids)
}

// Words repeat across prompts, so their tokens are cached: the tokenizer's
// regular expression and merges cost far more than a map lookup.
const (
	maxCachedWords   = 1 << 16
	maxCachedWordLen = 64 // bytes; longer words (long CJK runs) are not cached
	// maxTokenizedWordLen: a longer word is tokenized in pieces of at
	// most this many bytes (byte-pair merging is quadratic in a word's
	// length). Words of prose are far shorter, and keep their tokens.
	maxTokenizedWordLen = 256
)

var wordCache = struct {
	sync.RWMutex
	m map[string][]uint32
}{m: make(map[string][]uint32)}

// wordTokens returns the o200k_base tokens of " "+word (a normalised word
// has no spaces, and the leading space makes a word's tokens the same
// wherever it stands). The result must not be modified.
func wordTokens(word []byte) ([]uint32, error) {
	cacheable := len(word) <= maxCachedWordLen
	if cacheable {
		wordCache.RLock()
		ids, ok := wordCache.m[string(word)]
		wordCache.RUnlock()
		if ok {
			return ids, nil
		}
	}
	codec := o200k()
	if codec == nil {
		return nil, errNoTokenizer
	}
	raw, _, err := codec.Encode(" " + string(word))
	if err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	ids := make([]uint32, len(raw))
	for i, id := range raw {
		ids[i] = uint32(id)
	}
	if cacheable {
		wordCache.Lock()
		if len(wordCache.m) >= maxCachedWords {
			clear(wordCache.m) // bounded memory; the hot words come back quickly
		}
		wordCache.m[string(word)] = ids
		wordCache.Unlock()
	}
	return ids, nil
}

var errNoTokenizer = errors.New("o200k_base tokenizer unavailable")

// add puts weight w into the bucket of hash h, signed by its top bit.
func add(acc []float64, dims int, h uint64, w float64) {
	i := (h & 0xffffffff) * uint64(dims) >> 32
	if h>>63 == 1 {
		acc[i] -= w
	} else {
		acc[i] += w
	}
}

func hashStep(h uint64, r rune) uint64 {
	return (h ^ uint64(r)) * 0x100000001b3
}

func hashRunes(seed uint64, rs ...rune) uint64 {
	h := seed
	for _, r := range rs {
		h = hashStep(h, r)
	}
	return mix64(h)
}

// mix64 is the splitmix64 finaliser: it spreads every input bit over the output.
func mix64(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// isCJK reports whether r is written without spaces between words, so that
// character n-grams stand in for words.
func isCJK(r rune) bool {
	switch {
	case r < 0x1100: // Latin, Greek, Cyrillic, Arabic, Indic, ...
		return false
	case r >= 0x4E00 && r <= 0x9FFF, // CJK unified ideographs
		r >= 0x3040 && r <= 0x30FF, // hiragana, katakana
		r >= 0xAC00 && r <= 0xD7A3: // hangul syllables
		return true
	}
	return unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) ||
		unicode.Is(unicode.Katakana, r) || unicode.Is(unicode.Hangul, r)
}

// isWordRune reports whether r is part of a word (letter, digit or mark).
func isWordRune(r rune) bool {
	if r < 0x80 {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
	}
	if r >= 0x4E00 && r <= 0x9FFF {
		return true
	}
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
}

// normalizeText lower-cases text, folds full-width ASCII to ASCII, drops
// apostrophes, turns other punctuation, symbols and spaces into single spaces,
// and separates CJK runs from other letters. The result has no leading or
// trailing space.
func normalizeText(dst []rune, text string) []rune {
	space := true // suppress leading and repeated spaces
	prevCJK := false
	for _, r := range text {
		switch {
		case r >= 0xFF01 && r <= 0xFF5E: // full-width ASCII
			r -= 0xFEE0
		case r == 0x3000: // ideographic space
			r = ' '
		}
		if r == '\'' || r == '\u2019' || r == '\u02BC' {
			continue // "don't" -> "dont", "it's" -> "its"
		}
		if !isWordRune(r) {
			if !space {
				dst = append(dst, ' ')
				space = true
			}
			continue
		}
		if r < 0x80 {
			if 'A' <= r && r <= 'Z' {
				r += 'a' - 'A'
			}
		} else {
			r = unicode.ToLower(r)
		}
		cjk := isCJK(r)
		if !space && cjk != prevCJK {
			dst = append(dst, ' ')
		}
		dst = append(dst, r)
		space, prevCJK = false, cjk
	}
	if n := len(dst); n > 0 && dst[n-1] == ' ' {
		dst = dst[:n-1]
	}
	return dst
}

// forEachWord calls fn for each space-separated word of normalised runes.
func forEachWord(runes []rune, fn func(word []rune, cjk bool)) {
	start := 0
	for i := 0; i <= len(runes); i++ {
		if i < len(runes) && runes[i] != ' ' {
			continue
		}
		if i > start {
			fn(runes[start:i], isCJK(runes[start]))
		}
		start = i + 1
	}
}

// Politeness carries no question of its own: "Please explain X" asks
// "explain X", "请问X" asks "X". politeWords are dropped wherever they stand,
// greetings and politePrefixes only at the start of the text, so that
// "print hello world" keeps its "hello". Measured on bench/semantic, this
// lifts polite paraphrases to similarity 1 and costs nothing elsewhere.
var (
	politeWords    = map[string]bool{"please": true, "pls": true, "plz": true, "kindly": true}
	greetings      = map[string]bool{"hi": true, "hello": true, "hey": true, "dear": true}
	politePrefixes = [][]rune{[]rune("请问一下"), []rune("请问"), []rune("请教一下"), []rune("请教"), []rune("麻烦问一下"),
		[]rune("问一下"), []rune("你好"), []rune("您好")}
)

// dropPoliteness removes politeWords, leading greetings and a leading
// politePrefix from normalised runes, in place.
func dropPoliteness(runes []rune) []rune {
	out := runes[:0]
	start, leading := 0, true
	for i := 0; i <= len(runes); i++ {
		if i < len(runes) && runes[i] != ' ' {
			continue
		}
		w := runes[start:i]
		start = i + 1
		if len(w) == 0 {
			continue
		}
		switch {
		case isCJK(w[0]):
			if leading {
				for _, p := range politePrefixes {
					if len(w) >= len(p) && slices.Equal(w[:len(p)], p) {
						w = w[len(p):]
						break
					}
				}
				if len(w) == 0 {
					continue // "你好 请问 ...": still leading
				}
			}
		case len(w) <= 6 && (politeWords[string(w)] || leading && greetings[string(w)]):
			continue
		}
		leading = false
		if len(out) > 0 {
			out = append(out, ' ')
		}
		out = append(out, w...) // w starts at or after len(out): copying forward is safe
	}
	return out
}
