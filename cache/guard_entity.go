package cache

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// entitiesAllow reports whether the two texts agree on their entities:
// every name, quoted string, code identifier, URL and e-mail address found
// in one text also appears in the other (as words, ignoring case and
// punctuation), and both name the same dates (month and weekday names,
// today / tomorrow / 今天 / 明天 ...) and the same units (km, miles, 公里,
// °C, ...; synonyms count as one).
//
// A name is a capitalised word that does not start a sentence and is not a
// common word ("What", "Please"), or a word in capitals or with a capital
// inside ("NASA", "iPhone"). A sentence-initial name is not seen: the
// embedder and the order guard are left to judge it.
func entitiesAllow(query, candidate string) bool {
	q, c := scanEntities(query), scanEntities(candidate)
	if !sameSet(q.dates, c.dates) || !sameSet(q.units, c.units) {
		return false
	}
	if len(q.words) == 0 && len(c.words) == 0 {
		return true
	}
	qn, cn := " "+entityNorm(query)+" ", " "+entityNorm(candidate)+" "
	for _, e := range q.words {
		if !containsEntity(cn, e) {
			return false
		}
	}
	for _, e := range c.words {
		if !containsEntity(qn, e) {
			return false
		}
	}
	return true
}

// containsEntity reports whether the normalised entity e occurs in the
// normalised text t (padded with spaces) as whole words.
func containsEntity(t, e string) bool {
	if e == "" {
		return true
	}
	r, _ := utf8.DecodeRuneInString(e)
	if isCJKRune(r) {
		return strings.Contains(t, e)
	}
	return strings.Contains(t, " "+e+" ") || strings.Contains(t, " "+e+"s ") // "Bob's" is "bobs"
}

func sameSet(a, b []string) bool {
	for _, x := range a {
		if !containsStr(b, x) {
			return false
		}
	}
	for _, x := range b {
		if !containsStr(a, x) {
			return false
		}
	}
	return true
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// entityNorm lower-cases s, turns every run of characters other than
// letters and digits into one space and puts a space between CJK and other
// letters.
func entityNorm(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	space, prevCJK := true, false
	for _, r := range s {
		if r >= 0xFF01 && r <= 0xFF5E {
			r -= 0xFEE0
		}
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			cjk := isCJKRune(r)
			if !space && cjk != prevCJK {
				b.WriteByte(' ') // "学习Python" is two words
			}
			b.WriteRune(unicode.ToLower(r))
			space, prevCJK = false, cjk
			continue
		}
		if r == '\'' || r == '\u2019' {
			continue
		}
		if !space {
			b.WriteByte(' ')
			space = true
		}
	}
	return strings.TrimSpace(b.String())
}

// entities is what the entity guard reads from one text.
type entities struct {
	words []string // normalised names, quoted strings, identifiers, URLs, e-mails
	dates []string
	units []string // canonical unit names
}

// maxQuoted is the longest quoted string (in runes, normalised) that the
// guard compares.
const maxQuoted = 40

// quotePairs maps opening quotes to their closing quotes.
var quotePairs = map[rune]rune{'"': '"', '`': '`', '“': '”', '「': '」', '『': '』', '《': '》', '«': '»', '„': '“'}

// scanEntities reads the entities of one text (see entitiesAllow).
func scanEntities(s string) entities {
	var e entities
	s = foldWidth(s)
	// Quoted strings.
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		closing, ok := quotePairs[r]
		if !ok {
			i += size
			continue
		}
		end := strings.IndexRune(s[i+size:], closing)
		if end < 0 {
			break
		}
		// A long quotation is content, for the embedder to judge; a short
		// one names something ("what does "foo" mean").
		if n := entityNorm(s[i+size : i+size+end]); n != "" && utf8.RuneCountInString(n) <= maxQuoted {
			e.words = append(e.words, n)
		}
		i += size + end + utf8.RuneLen(closing)
	}
	// Whitespace-separated fields: URLs, e-mails, identifiers, names, dates, units.
	sentenceStart := true
	prevNumber := false
	fields := strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || r == '\u3000' })
	for _, f := range fields {
		core := strings.TrimFunc(f, func(r rune) bool { return !isEntityRune(r) })
		lower := strings.ToLower(core)
		switch {
		case core == "":
		case strings.Contains(lower, "://") || strings.HasPrefix(lower, "www."):
			e.words = append(e.words, entityNorm(core))
		case strings.Count(core, "@") == 1 && strings.Contains(core[strings.IndexByte(core, '@'):], "."):
			e.words = append(e.words, entityNorm(core))
		case isIdentifier(core):
			e.words = append(e.words, entityNorm(core))
		default:
			e.scanWords(core, &sentenceStart, &prevNumber)
		}
		if last, _ := utf8.DecodeLastRuneInString(f); strings.ContainsRune(".?!。？！:：", last) {
			sentenceStart = true
		}
	}
	e.scanHan(s)
	return e
}

// scanWords reads names, dates and units from one field that is not a URL,
// e-mail or identifier ("Paris,", "10km", "Bob's").
func (e *entities) scanWords(field string, sentenceStart, prevNumber *bool) {
	for _, w := range splitWords(field) {
		first, _ := utf8.DecodeRuneInString(w)
		if first < 0x80 && first >= '0' && first <= '9' {
			// A number, maybe with a unit glued on: 10km, 5kg.
			i := strings.IndexFunc(w, func(r rune) bool { return !(r >= '0' && r <= '9' || r == '.' || r == ',') })
			if i > 0 {
				if u, ok := unitAfterNumber[strings.ToLower(w[i:])]; ok {
					e.units = append(e.units, u)
				}
			}
			*prevNumber, *sentenceStart = true, false
			continue
		}
		if isCJKRune(first) {
			*prevNumber, *sentenceStart = false, false
			continue
		}
		lower := strings.ToLower(w)
		if d, ok := dateWords[lower]; ok {
			e.dates = append(e.dates, d)
		} else if u, ok := unitWords[lower]; ok {
			e.units = append(e.units, u)
		} else if u, ok := unitAfterNumber[lower]; ok && *prevNumber {
			e.units = append(e.units, u)
		} else if isName(w, *sentenceStart) && !commonWords[lower] {
			e.words = append(e.words, lower)
		}
		*prevNumber, *sentenceStart = false, false
	}
}

// scanHan reads Chinese date words and units after numbers.
func (e *entities) scanHan(s string) {
	for _, d := range hanDates {
		if strings.Contains(s, d) {
			e.dates = append(e.dates, d)
		}
	}
	prevNum := false
	for i, r := range s {
		if r >= '0' && r <= '9' || r >= '０' && r <= '９' {
			prevNum = true
			continue
		}
		if _, ok := hanDigit(r); ok && r != '一' {
			prevNum = true
			continue
		}
		if prevNum && r != ' ' {
			for _, u := range hanUnits {
				if strings.HasPrefix(s[i:], u.text) {
					e.units = append(e.units, u.canon)
					break
				}
			}
		}
		if r != ' ' {
			prevNum = false
		}
	}
}

// splitWords splits a field into runs of letters and digits (an apostrophe
// inside a word ends it: "Bob's" gives "Bob"); a CJK run is a word apart
// from the Latin ones beside it ("学习Python编程").
func splitWords(f string) []string {
	var out []string
	start, prevCJK := -1, false
	for i, r := range f {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			if start >= 0 {
				out = append(out, f[start:i])
				start = -1
			}
			continue
		}
		cjk := isCJKRune(r)
		if start >= 0 && cjk != prevCJK {
			out = append(out, f[start:i])
			start = -1
		}
		if start < 0 {
			start = i
		}
		prevCJK = cjk
	}
	if start >= 0 {
		out = append(out, f[start:])
	}
	return out
}

// foldWidth turns full-width ASCII forms into ASCII.
func foldWidth(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r >= 0xFF01 && r <= 0xFF5E || r == 0x3000 }) {
		return s
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 0xFF01 && r <= 0xFF5E:
			return r - 0xFEE0
		case r == 0x3000:
			return ' '
		}
		return r
	}, s)
}

func isEntityRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '/' || r == '@'
}

// isIdentifier reports whether w looks like code: snake_case, camelCase,
// a dotted path (os.path.join, example.com) or a call (len()).
func isIdentifier(w string) bool {
	if strings.ContainsFunc(w, func(r rune) bool { return r >= 0x80 }) {
		return false // code is ASCII; "直线.你能" is two sentences
	}
	if strings.HasSuffix(w, "()") {
		return true
	}
	hasLetter, lowerThenUpper, prevLower := false, false, false
	for i, r := range w {
		switch {
		case r == '_' && i > 0:
			return true
		case r == '.' && i > 0 && i < len(w)-1:
			next, _ := utf8.DecodeRuneInString(w[i+1:])
			if unicode.IsLetter(next) {
				return true
			}
		case unicode.IsUpper(r):
			if prevLower {
				lowerThenUpper = true
			}
			hasLetter = true
		case unicode.IsLetter(r):
			hasLetter = true
		}
		prevLower = unicode.IsLower(r)
	}
	return hasLetter && lowerThenUpper
}

// isName reports whether the word w reads as a name: capitalised and not at
// the start of a sentence, or in capitals (at least two letters).
func isName(w string, sentenceStart bool) bool {
	first, size := utf8.DecodeRuneInString(w)
	if !unicode.IsUpper(first) {
		return false
	}
	rest := w[size:]
	if rest == "" {
		return false // "I", "A"
	}
	allUpper := strings.IndexFunc(rest, func(r rune) bool { return !unicode.IsUpper(r) && !unicode.IsDigit(r) }) < 0
	return allUpper || !sentenceStart
}

// commonWords are capitalised often without being names: after a comma
// ("Please, What ..."), in titles, or as greetings.
var commonWords = setOf("a", "an", "the", "i", "im", "what", "whats", "which", "who", "whom", "whose", "why", "when",
	"where", "how", "is", "are", "was", "were", "be", "do", "does", "did", "can", "could", "would", "should", "will",
	"shall", "may", "might", "must", "have", "has", "had", "please", "hi", "hello", "hey", "thanks", "thank", "dear",
	"tell", "explain", "give", "show", "write", "help", "and", "or", "but", "if", "so", "then", "yes", "no", "ok", "okay",
	"my", "your", "our", "their", "his", "her", "its", "it", "this", "that", "these", "those", "there", "here", "in",
	"on", "at", "of", "for", "to", "from", "by", "with", "about", "as", "not", "you", "we", "they", "he", "she", "me",
	"mr", "mrs", "ms", "dr", "prof", "gov", "sen", "rep", "st", "inc", "corp", "co", "ltd", "llc", "jr", "sr",
	"kindly", "quick", "question", "answer", "note", "also", "just", "now", "again", "sorry", "excuse")

// dateWords map English date words to a canonical form. "May" is left out:
// it is also the verb.
var dateWords = map[string]string{
	"january": "jan", "jan": "jan", "february": "feb", "feb": "feb", "march": "mar", "april": "apr", "apr": "apr",
	"june": "jun", "jun": "jun", "july": "jul", "jul": "jul", "august": "aug", "aug": "aug",
	"september": "sep", "sep": "sep", "sept": "sep", "october": "oct", "oct": "oct", "november": "nov", "nov": "nov",
	"december": "dec", "dec": "dec",
	"monday": "mon", "tuesday": "tue", "wednesday": "wed", "thursday": "thu", "friday": "fri", "saturday": "sat",
	"sunday": "sun", "today": "today", "tonight": "today", "tomorrow": "tomorrow", "yesterday": "yesterday",
	"weekend": "weekend",
}

// hanDates are Chinese date words, compared as written.
var hanDates = []string{"今天", "明天", "昨天", "后天", "前天", "今年", "明年", "去年", "今晚", "明晚", "周末", "上周", "下周", "本周",
	"上个月", "下个月", "这个月", "星期天", "星期日", "周日"}

// unitWords are unit names that are units wherever they stand.
var unitWords = map[string]string{
	"kilometer": "km", "kilometers": "km", "kilometre": "km", "kilometres": "km", "km": "km",
	"mile": "mi", "miles": "mi", "meter": "m", "meters": "m", "metre": "m", "metres": "m",
	"centimeter": "cm", "centimeters": "cm", "cm": "cm", "millimeter": "mm", "millimeters": "mm", "mm": "mm",
	"foot": "ft", "feet": "ft", "inch": "in", "inches": "in", "yard": "yd", "yards": "yd",
	"kilogram": "kg", "kilograms": "kg", "kg": "kg", "kgs": "kg", "gram": "g", "grams": "g",
	"pound": "lb", "pounds": "lb", "lbs": "lb", "ounce": "oz", "ounces": "oz", "ton": "t", "tons": "t", "tonnes": "t",
	"celsius": "c", "fahrenheit": "f", "kelvin": "k",
	"liter": "l", "liters": "l", "litre": "l", "litres": "l", "gallon": "gal", "gallons": "gal", "ml": "ml",
	"dollar": "usd", "dollars": "usd", "usd": "usd", "euro": "eur", "euros": "eur", "eur": "eur",
	"yuan": "cny", "rmb": "cny", "cny": "cny", "yen": "jpy", "jpy": "jpy", "gbp": "gbp",
	"second": "s", "seconds": "s", "minute": "min", "minutes": "min", "hour": "h", "hours": "h",
	"day": "d", "days": "d", "week": "wk", "weeks": "wk", "month": "mo", "months": "mo", "year": "y", "years": "y",
	"byte": "b", "bytes": "b", "kb": "kb", "mb": "mb", "gb": "gb", "tb": "tb", "mph": "mph", "kmh": "kmh",
	"percent": "%",
}

// unitAfterNumber are short units that count only right after a number.
var unitAfterNumber = map[string]string{
	"km": "km", "mi": "mi", "m": "m", "cm": "cm", "mm": "mm", "ft": "ft", "yd": "yd", "kg": "kg", "g": "g",
	"lb": "lb", "lbs": "lb", "oz": "oz", "t": "t", "c": "c", "f": "f", "k": "k", "l": "l", "ml": "ml",
	"s": "s", "sec": "s", "secs": "s", "min": "min", "mins": "min", "h": "h", "hr": "h", "hrs": "h", "d": "d",
	"kb": "kb", "mb": "mb", "gb": "gb", "tb": "tb", "ms": "ms", "gal": "gal",
}

// hanUnits are Chinese units after a number; longer forms first.
var hanUnits = []struct{ text, canon string }{
	{"公里", "km"}, {"千米", "km"}, {"英里", "mi"}, {"厘米", "cm"}, {"毫米", "mm"}, {"平方米", "m2"}, {"米", "m"},
	{"公斤", "kg"}, {"千克", "kg"}, {"斤", "jin"}, {"克", "g"}, {"磅", "lb"}, {"吨", "t"},
	{"摄氏度", "c"}, {"华氏度", "f"}, {"度", "deg"}, {"毫升", "ml"}, {"升", "l"},
	{"美元", "usd"}, {"欧元", "eur"}, {"英镑", "gbp"}, {"日元", "jpy"}, {"元", "cny"}, {"块", "cny"},
	{"小时", "h"}, {"分钟", "min"}, {"秒", "s"}, {"天", "d"}, {"周", "wk"}, {"个月", "mo"}, // not 年: "2015年" is a year
}

func setOf(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}
