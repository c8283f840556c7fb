package cache

import (
	"slices"
	"strconv"
	"unicode/utf8"
)

// Guards are cheap lexical checks that veto a semantic match whose cosine
// similarity is high but whose meaning differs in a way embeddings blur.
type Guards struct {
	// Numbers rejects a match unless both texts hold the same multiset of
	// numbers (ASCII or full-width digit runs, and runs of Chinese numerals
	// converted to their value).
	Numbers bool `yaml:"numbers"`
	// Negation rejects a match unless both texts hold the same number of
	// negation words (English) or negation characters (Chinese).
	Negation bool `yaml:"negation"`
	// Order rejects a match whose shared words stand in an order that
	// moving one block of words cannot explain: "Is a cat bigger than a
	// dog?" is not "Is a dog bigger than a cat?", while "Who are you?
	// Hello" is "Hello, who are you?".
	Order bool `yaml:"order"`
	// Entities rejects a match unless both texts hold the same names,
	// quoted strings, code identifiers, URLs, e-mail addresses, date words
	// and units.
	Entities bool `yaml:"entities"`
	// MaxLengthRatio rejects a match whose longer text has more than
	// MaxLengthRatio times the characters of the shorter plus
	// lengthSlack: a prompt of one word said 50,000 times embeds like the
	// same word said 10,000 times, yet asks something else. 0: off.
	MaxLengthRatio float64 `yaml:"max_length_ratio"`
}

// lengthSlack is the characters the length guard allows beyond the ratio,
// so that short rewordings ("Hi" and "Hi, who are you?") are not vetoed.
const lengthSlack = 32

// DefaultGuards turns every guard on.
func DefaultGuards() Guards {
	return Guards{Numbers: true, Negation: true, Order: true, Entities: true, MaxLengthRatio: 2}
}

// lengthAllows is the length guard: the longer of a and b has at most
// ratio times the characters of the shorter, plus lengthSlack.
func lengthAllows(ratio float64, a, b string) bool {
	la, lb := utf8.RuneCountInString(a), utf8.RuneCountInString(b)
	short, long := min(la, lb), max(la, lb)
	return float64(long) <= ratio*float64(short)+lengthSlack
}

// Reasons GuardsAllow gives for a rejection.
const (
	GuardNumbers  = "numbers"
	GuardNegation = "negation"
	GuardEntity   = "entity"
	GuardOrder    = "order"
	GuardLength   = "length"
)

// GuardReasons lists every reason GuardsAllow can give, for metric labels.
var GuardReasons = []string{GuardNumbers, GuardNegation, GuardEntity, GuardOrder, GuardLength}

// GuardsAllow reports whether a semantic candidate may answer the query;
// reason is "" when allowed, else one of GuardReasons. The entity and
// order guards are described at entitiesAllow and orderAllows.
//
// Numbers: "12*7" never matches "12*8"; "12 and 7" matches "7 and 12". Digit
// runs compare as written ("3.5" is the runs 3 and 5; "007" differs from
// "7"), full-width digits count as ASCII. A run of Chinese numerals becomes
// its value, so "十二" equals "12" and "二零二四" equals "2024"; a lone 一 is
// skipped because it is usually the article "a" (一个, 一下), as are the
// idioms 万一 and 千万, the 百 of 百度 and the 十 of 十分 (very). Mixed forms
// such as "3万" are not converted and so differ from "30000": the guard errs
// towards rejecting.
//
// Negation: the counts of negation markers must be equal (not mere
// presence, so "not ... not" differs from one "not"). English words, case
// insensitive: not, no, never, without, none, nobody, nothing, neither, nor,
// cannot and every word ending in n't (don't, can't, won't), also written
// without the apostrophe (dont, cant). Chinese characters: 不 没 别 非 无 未 勿,
// except in a few common words where they do not negate (不过 不错 不少 不断
// 不仅 不管 差不多 了不起 非常 非洲 无论 无锡 未来 区别 特别 别人, 什么不同
// ...), in A-not-A questions (是不是, 有没有, 可不可以) and as a clause-final
// question particle (好玩不？), which ask rather than deny.
//
// Length: see Guards.MaxLengthRatio; checked first, as the cheapest.
func GuardsAllow(g Guards, query, candidate string) (ok bool, reason string) {
	if g.MaxLengthRatio > 0 && !lengthAllows(g.MaxLengthRatio, query, candidate) {
		return false, GuardLength
	}
	if g.Numbers || g.Negation {
		var q, c textMarks
		q.scan(query, g)
		c.scan(candidate, g)
		if g.Numbers && !sameMultiset(q.numbers(), c.numbers()) {
			return false, GuardNumbers
		}
		if g.Negation && (q.negations != c.negations || q.negations > 0 && negationMoved(query, candidate)) {
			return false, GuardNegation
		}
	}
	if g.Entities && !entitiesAllow(query, candidate) {
		return false, GuardEntity
	}
	if g.Order && !orderAllows(query, candidate) {
		return false, GuardOrder
	}
	return true, ""
}

// textMarks is what the guards read from one text. Numbers are kept as
// 64-bit hashes of their canonical digit strings, on the stack for the
// first few.
type textMarks struct {
	negations int
	nNums     int
	inline    [16]uint64
	extra     []uint64
}

func (m *textMarks) addNumber(h uint64) {
	if m.nNums < len(m.inline) {
		m.inline[m.nNums] = h
	} else {
		m.extra = append(m.extra, h)
	}
	m.nNums++
}

func (m *textMarks) numbers() []uint64 {
	if m.nNums <= len(m.inline) {
		return m.inline[:m.nNums]
	}
	return append(m.inline[:], m.extra...)
}

func sameMultiset(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

const (
	fnvOffset uint64 = 0xcbf29ce484222325
	fnvPrime  uint64 = 0x100000001b3
	// rawSeed hashes Chinese numeral runs that do not parse, apart from values.
	rawSeed uint64 = 0x84222325cbf29ce4
)

// scan reads numbers and negations from s in one pass.
func (m *textMarks) scan(s string, g Guards) {
	var (
		digitHash uint64 // hash of the current digit run
		inDigits  bool
		hanStart  = -1 // byte offset of the current Chinese numeral run
		wordStart = -1 // byte offset of the current English word
		prev      rune // the rune before r
	)
	flushDigits := func() {
		if inDigits {
			m.addNumber(digitHash)
			inDigits = false
		}
	}
	flushHan := func(end int) {
		if hanStart >= 0 {
			m.addHanNumber(s, hanStart, end)
			hanStart = -1
		}
	}
	flushWord := func(end int) {
		if wordStart >= 0 {
			if isNegationWord(s[wordStart:end]) {
				m.negations++
			}
			wordStart = -1
		}
	}
	for i, r := range s {
		if r >= '０' && r <= '９' {
			r = r - '０' + '0'
		}
		if g.Numbers {
			if r >= '0' && r <= '9' {
				if !inDigits {
					digitHash, inDigits = fnvOffset, true
				}
				digitHash = (digitHash ^ uint64(r)) * fnvPrime
			} else {
				flushDigits()
			}
			if _, ok := hanDigit(r); ok {
				if hanStart < 0 {
					hanStart = i
				}
			} else {
				flushHan(i)
			}
		}
		if g.Negation {
			if isWordRune(r) {
				if wordStart < 0 {
					wordStart = i
				}
			} else {
				flushWord(i)
			}
			if isHanNegation(r) {
				next, size := utf8.DecodeRuneInString(s[i+utf8.RuneLen(r):])
				if size == 0 {
					next = 0 // end of text
				}
				if hanNegates(prev, r, next, s[i:]) {
					m.negations++
				}
			}
		}
		prev = r
	}
	flushDigits()
	flushHan(len(s))
	flushWord(len(s))
}

// addHanNumber adds the Chinese numeral run s[start:end], unless it is a
// known non-numeric use.
func (m *textMarks) addHanNumber(s string, start, end int) {
	run := s[start:end]
	switch run {
	case "一", "万一", "千万":
		return
	case "百":
		if next, _ := utf8.DecodeRuneInString(s[end:]); next == '度' {
			return // 百度, Baidu
		}
	case "十":
		next, size := utf8.DecodeRuneInString(s[end:])
		if after, _ := utf8.DecodeRuneInString(s[end+size:]); next == '分' && after != '钟' && after != '鐘' {
			return // 十分 very (but 十分钟 ten minutes)
		}
	}
	if v, ok := parseHanNumber(run); ok {
		var buf [20]byte
		h := fnvOffset
		for _, b := range strconv.AppendUint(buf[:0], v, 10) {
			h = (h ^ uint64(b)) * fnvPrime
		}
		m.addNumber(h)
		return
	}
	h := rawSeed
	for i := 0; i < len(run); i++ {
		h = (h ^ uint64(run[i])) * fnvPrime
	}
	m.addNumber(h)
}

// hanDigit returns the value of a Chinese digit (0-9) or unit (10, 100, ...).
func hanDigit(r rune) (uint64, bool) {
	switch r {
	case '零', '〇':
		return 0, true
	case '一', '壹':
		return 1, true
	case '二', '两', '貳', '贰':
		return 2, true
	case '三', '叁':
		return 3, true
	case '四', '肆':
		return 4, true
	case '五', '伍':
		return 5, true
	case '六', '陆', '陸':
		return 6, true
	case '七', '柒':
		return 7, true
	case '八', '捌':
		return 8, true
	case '九', '玖':
		return 9, true
	case '十', '拾':
		return 10, true
	case '百', '佰':
		return 100, true
	case '千', '仟':
		return 1000, true
	case '万', '萬':
		return 1e4, true
	case '亿', '億':
		return 1e8, true
	}
	return 0, false
}

// parseHanNumber converts a run of Chinese numerals to its value: with units
// ("三百零五" = 305, "十二" = 12, "两万" = 20000, "一亿二千万" = 120000000)
// or digit by digit without them ("二零二四" = 2024). A unit without a digit
// counts one of it ("十二" = 12, "百" = 100). It reports false for runs that
// are not a well-formed number, such as "三四百".
func parseHanNumber(run string) (uint64, bool) {
	if utf8.RuneCountInString(run) > 18 {
		return 0, false
	}
	hasUnit := false
	for _, r := range run {
		if v, _ := hanDigit(r); v >= 10 {
			hasUnit = true
			break
		}
	}
	if !hasUnit {
		var v uint64
		for _, r := range run {
			d, _ := hanDigit(r)
			v = v*10 + d
		}
		return v, true
	}
	// yi: the part before 亿; wan: before 万; section: below 万.
	var yi, wan, section, digit uint64
	pending := false // digit holds a non-zero digit not yet given a unit
	for _, r := range run {
		d, _ := hanDigit(r)
		switch {
		case d < 10:
			if pending && d != 0 {
				return 0, false
			}
			digit, pending = d, d != 0
		case d < 1e4: // 十 百 千
			if !pending {
				digit = 1
			}
			section += digit * d
			digit, pending = 0, false
		case d == 1e4: // 万
			if wan != 0 {
				return 0, false
			}
			wan = max(section+digit, 1) * d
			section, digit, pending = 0, 0, false
		default: // 亿
			if yi != 0 {
				return 0, false
			}
			yi = max(wan+section+digit, 1) * d
			wan, section, digit, pending = 0, 0, 0, false
		}
	}
	return yi + wan + section + digit, true
}

// isWordRune reports whether r continues an English word; apostrophes do,
// so that "don't" is one word.
func isWordRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '\'' || r == '\u2019'
}

// isNegationWord reports whether w (letters and apostrophes) is an English
// negation, case-insensitively, without allocating.
func isNegationWord(w string) bool {
	var buf [16]byte
	n := 0
	for i := 0; i < len(w); {
		if w[i] == 0xE2 && i+2 < len(w) && w[i+1] == 0x80 && w[i+2] == 0x99 { // U+2019
			if n == len(buf) {
				return false
			}
			buf[n] = '\''
			n, i = n+1, i+3
			continue
		}
		if n == len(buf) {
			return false // longer than any negation word
		}
		c := w[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[n] = c
		n, i = n+1, i+1
	}
	word := buf[:n]
	for len(word) > 0 && word[0] == '\'' {
		word = word[1:] // quoted: 'no'
	}
	for len(word) > 0 && word[len(word)-1] == '\'' {
		word = word[:len(word)-1]
	}
	n = len(word)
	if n >= 3 && string(word[n-3:]) == "n't" {
		return true
	}
	switch string(word) {
	case "not", "no", "never", "without", "none", "nobody", "nothing",
		"neither", "nor", "cannot",
		"dont", "doesnt", "didnt", "isnt", "arent", "wasnt", "werent",
		"cant", "couldnt", "wont", "wouldnt", "shouldnt", "havent",
		"hasnt", "hadnt", "mustnt", "neednt", "aint":
		return true
	}
	return false
}

func isHanNegation(r rune) bool {
	switch r {
	case '不', '没', '沒', '别', '別', '非', '无', '無', '未', '勿':
		return true
	}
	return false
}

// hanNegates reports whether the negation character r, preceded by prev
// and followed by next (0 at the end; rest starts at r), negates.
func hanNegates(prev, r, next rune, rest string) bool {
	if prev == next && prev != 0 {
		return false // A-not-A question: 是不是, 有没有, 好不好
	}
	switch r {
	case '不', '没', '沒':
		if prev != 0 && endsClause(next) {
			return false // question particle: 好玩不？ 有网站没？
		}
		if next == '同' && (prev == '么' || prev == '麼' || prev == '何') {
			return false // 有什么不同 / 有何不同: what is the difference
		}
		switch next {
		case '过', '過', '错', '錯', '少', '断', '斷', '仅', '僅', '管', '然':
			return false // 不过 but, 不错 good, 不少 many, 不断, 不仅, 不管, 不然
		}
		if prev == '差' && next == '多' || prev == '了' && next == '起' {
			return false // 差不多 about, 了不起 amazing
		}
		if len(rest) >= len("不好意思") && rest[:len("不好意思")] == "不好意思" {
			return false // sorry
		}
	case '非':
		switch next {
		case '常', '洲':
			return false // 非常 very, 非洲 Africa
		}
	case '无', '無':
		switch next {
		case '论', '論', '锡', '錫':
			return false // 无论 no matter, 无锡 Wuxi
		}
	case '未':
		if next == '来' || next == '來' {
			return false // 未来 future
		}
	case '别', '別':
		switch prev {
		case '区', '區', '特', '分', '类', '類', '级', '級', '性', '识', '識',
			'差', '告', '个', '個', '鉴', '鑒', '辨', '派', '离', '離', '送', '道':
			return false // 区别 difference, 特别 especially, 性别 sex, ...
		}
		switch next {
		case '人', '的', '名', '墅', '针', '致', '处', '處':
			return false // 别人 others, 别的 other, 别名 alias, 别墅 villa
		}
	}
	return true
}

// endsClause reports whether r ends a clause: end of text or punctuation.
func endsClause(r rune) bool {
	switch r {
	case 0, '?', '？', '!', '！', '.', '。', ',', '，', ';', '；', '~', '～', '…', '\n':
		return true
	}
	return false
}
