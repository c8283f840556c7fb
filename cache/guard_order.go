package cache

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxOrderBreaks is the most breakpoints the order guard lets through: one
// block of words moved elsewhere ("Hello, who are you?" / "Who are you?
// Hello") makes at most 3; a swap of two words across others ("a dog bigger
// than a cat" / "a cat bigger than a dog") makes 4.
const maxOrderBreaks = 3

// orderAllows reports whether the words the two texts share appear in an
// order that one moved block can explain.
//
// Tokens are lower-cased words of letters and digits, and single CJK
// characters; the k-th occurrence of a token in one text pairs with its
// k-th occurrence in the other. The shared tokens, in the order of one
// text, are numbered by their rank in the other; a breakpoint is a
// neighbour pair whose ranks do not follow each other, counting the ends
// as neighbours too. The texts pass when either reading has at most
// maxOrderBreaks breakpoints, when they are the same clauses in another
// order ("A? B?" / "B? A?"), or when both ask to compare and differ only in
// the order of the compared items ("A和B哪个好" / "B和A哪个好").
//
// Measured on PAWS-X, letting clauses move freely inside a longer text let
// through swaps across a semicolon ("A spent three days in the fish; B
// will spend three days in the tomb"), and cost nothing on LCQMC.
func orderAllows(query, candidate string) bool {
	var qs, cs orderScratch
	q := qs.tokens(query)
	c := cs.tokens(candidate)
	if len(q) < 2 || len(c) < 2 {
		return true
	}
	if sameClauses(query, candidate) {
		return true // the same clauses in another order
	}
	if asksToCompare(query) && asksToCompare(candidate) {
		q, qs.clause = sortCoordinated(q, qs.clause)
		c, cs.clause = sortCoordinated(c, cs.clause)
	}
	return orderBreaks(q, c) <= maxOrderBreaks || orderBreaks(c, q) <= maxOrderBreaks
}

// sortCoordinated puts the items of each sentence that coordinators
// separate ("A 还是 B" / "B 还是 A") in one canonical order.
func sortCoordinated(toks []string, clause []int) ([]string, []int) {
	type seg struct {
		toks   []string
		clause []int
		key    string
	}
	var (
		out     []string
		outCl   []int
		segs    []seg
		current seg
	)
	flushSentence := func() {
		segs = append(segs, current)
		current = seg{}
		slices.SortStableFunc(segs, func(a, b seg) int { return strings.Compare(a.key, b.key) })
		for i, sg := range segs {
			if i > 0 {
				out, outCl = append(out, "\x00or"), append(outCl, sg.clause[0])
			}
			out, outCl = append(out, sg.toks...), append(outCl, sg.clause...)
		}
		segs = segs[:0]
	}
	for i, t := range toks {
		if i > 0 && clause[i] != clause[i-1] && len(current.toks) > 0 {
			flushSentence()
		}
		if coordinators[t] {
			if len(current.toks) > 0 {
				segs = append(segs, current)
			}
			current = seg{}
			continue
		}
		current.toks, current.clause = append(current.toks, t), append(current.clause, clause[i])
		current.key += t + " "
	}
	if len(current.toks) > 0 || len(segs) > 0 {
		if len(current.toks) == 0 {
			current = segs[len(segs)-1]
			segs = segs[:len(segs)-1]
		}
		flushSentence()
	}
	return out, outCl
}

// orderBreaks counts the breakpoints of a's shared tokens ranked in b.
func orderBreaks(a, b []string) int {
	type occ struct {
		tok string
		k   int
	}
	bPos := make(map[occ]int, len(b))
	seen := make(map[string]int, len(b))
	for i, t := range b {
		bPos[occ{t, seen[t]}] = i
		seen[t]++
	}
	clear(seen)
	// Positions in b of the shared tokens, in a's order.
	pos := make([]int, 0, len(a))
	for _, t := range a {
		k := seen[t]
		seen[t]++
		if p, ok := bPos[occ{t, k}]; ok {
			pos = append(pos, p)
		}
	}
	if len(pos) < 2 {
		return 0
	}
	rank := ranks(pos)
	breaks := 0
	if rank[0] != 0 {
		breaks++
	}
	for i := 1; i < len(rank); i++ {
		if rank[i] != rank[i-1]+1 {
			breaks++
		}
	}
	if rank[len(rank)-1] != len(rank)-1 {
		breaks++
	}
	return breaks
}

// ranks replaces each of the distinct values of pos by its rank (0-based).
func ranks(pos []int) []int {
	maxPos := 0
	for _, p := range pos {
		maxPos = max(maxPos, p)
	}
	seen := make([]int, maxPos+1)
	for i := range seen {
		seen[i] = -1
	}
	for _, p := range pos {
		seen[p] = 0
	}
	r := 0
	for i := range seen {
		if seen[i] == 0 {
			seen[i] = r
			r++
		}
	}
	out := make([]int, len(pos))
	for i, p := range pos {
		out[i] = seen[p]
	}
	return out
}

type orderScratch struct {
	buf    []byte
	toks   []string
	clause []int // sentence number of each token
}

// tokens splits s into lower-cased words of letters and digits, with each
// CJK character a token of its own.
func (o *orderScratch) tokens(s string) []string {
	o.toks, o.clause = o.toks[:0], o.clause[:0]
	start, clause := -1, 0
	push := func(tok string) {
		o.toks, o.clause = append(o.toks, tok), append(o.clause, clause)
	}
	flush := func() {
		if start >= 0 {
			push(string(o.buf[start:]))
			o.buf = o.buf[:start]
			start = -1
		}
	}
	for _, r := range s {
		if r >= 0xFF01 && r <= 0xFF5E { // full-width ASCII
			r -= 0xFEE0
		}
		switch {
		case isCJKRune(r):
			flush()
			if r == '是' && len(o.toks) > 0 && o.toks[len(o.toks)-1] == "还" {
				o.toks, o.clause = o.toks[:len(o.toks)-1], o.clause[:len(o.clause)-1]
				push("还是") // or
			} else {
				push(string(r))
			}
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			if start < 0 {
				start = len(o.buf)
			}
			o.buf = utf8.AppendRune(o.buf, unicode.ToLower(r))
		case r == '\'' || r == '\u2019':
			// "don't" is one word
		default:
			flush()
			if clauseEnd(r) {
				clause++
			}
		}
	}
	flush()
	return o.toks
}

// clauseEnd reports whether punctuation r ends a sentence, inside which
// sortCoordinated orders compared items.
func clauseEnd(r rune) bool {
	switch r {
	case '.', '?', '!', ';', '\n', '。', '？', '！', '；':
		return true
	}
	return false
}

// isCJKRune reports whether r is written without spaces between words.
func isCJKRune(r rune) bool {
	if r < 0x1100 {
		return false
	}
	return r >= 0x4E00 && r <= 0x9FFF || r >= 0x3040 && r <= 0x30FF || r >= 0xAC00 && r <= 0xD7A3 ||
		unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) || unicode.Is(unicode.Katakana, r)
}

// coordinators join items whose order does not matter when the text asks
// to compare them.
var coordinators = setOf("and", "or", "vs", "versus", "和", "与", "跟", "或", "还是")

// comparisonMarkers make a text a comparison ("A or B, which is better"),
// where swapping the coordinated items keeps the meaning. Only when both
// texts compare are coordinated items put in one order: "a degree from A and a master's from B" is
// not "a degree from B and a master's from A".
var comparisonMarkers = []string{"哪个", "哪一个", "哪家", "哪种", "哪款", "还是", "区别", "不同", "对比", "比较",
	"which", "difference", " vs", "versus", "compare", "better"}

func asksToCompare(s string) bool {
	for _, m := range comparisonMarkers {
		if len(m) < 8 && m[0] < 0x80 {
			if containsFold(s, m) {
				return true
			}
		} else if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// containsFold reports whether s contains the lower-case ASCII word m,
// ignoring ASCII case.
func containsFold(s, m string) bool {
	for i := 0; i+len(m) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(m)], m) {
			return true
		}
	}
	return false
}

// negationMoved reports whether a negation word both texts share stands
// before another word in one than in the other: "why does it not start
// when the disk is full" / "why does it start when the disk is not full".
// The k-th occurrence of a negation in one text is compared with its k-th
// occurrence in the other; negations written differently (not / doesn't)
// are left to the count.
func negationMoved(query, candidate string) bool {
	var qs, cs orderScratch
	q := qs.tokens(query)
	c := cs.tokens(candidate)
	next := func(toks []string) map[string][]string {
		m := map[string][]string{}
		for i, t := range toks {
			if isNegationToken(t) {
				j := i + 1
				if j < len(toks) && toks[j] == "有" && (t == "没" || t == "沒") {
					j++ // 没有 is 没
				}
				n := ""
				if j < len(toks) {
					n = toks[j]
				}
				m[t] = append(m[t], n)
			}
		}
		return m
	}
	qn, cn := next(q), next(c)
	for tok, qNext := range qn {
		for k, n := range qNext {
			if k < len(cn[tok]) && cn[tok][k] != n {
				return true
			}
		}
	}
	return false
}

// isNegationToken reports whether an orderScratch token negates.
func isNegationToken(t string) bool {
	if r, size := utf8.DecodeRuneInString(t); size == len(t) && isHanNegation(r) {
		return true
	}
	return isNegationWord(t)
}

// sameClauses reports whether both texts are the same clauses (split at
// any punctuation, compared without case or spacing) in some order.
func sameClauses(a, b string) bool {
	split := func(s string) []string {
		parts := strings.FieldsFunc(s, func(r rune) bool {
			return !unicode.IsLetter(r) && !unicode.IsDigit(r) && !unicode.IsSpace(r) && r != '\'' && r != '\u2019'
		})
		out := parts[:0]
		for _, p := range parts {
			if p = strings.Join(strings.Fields(strings.ToLower(p)), " "); p != "" {
				out = append(out, p)
			}
		}
		slices.Sort(out)
		return out
	}
	ca, cb := split(a), split(b)
	return len(ca) > 1 && slices.Equal(ca, cb)
}
