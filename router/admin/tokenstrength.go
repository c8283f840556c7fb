package admin

import (
	"fmt"
	"math"
	"strings"
)

// minTokenBits is the least entropy an admin token may have by
// tokenStrength's estimate: 128 bits, 32 random hex characters or 22 of
// base64url. openssl rand -hex 32 gives 256.
const minTokenBits = 128

// commonWords are words admin tokens get built from; any of them in a
// token (case aside) counts as one guess among few, not as its letters.
var commonWords = []string{
	"frontdoor", "password", "changeme", "replaceme", "welcome", "default", "example", "letmein", "passwd",
	"secret", "qwerty", "admin", "token", "login", "master", "test", "root", "pass", "key",
}

// Bits a token's parts are worth to a guesser who knows the patterns
// people use: a common word is one of a short list, a character that
// continues a run or a sequence ("aaa", "abc", "987") is a yes or no, and
// a stretch repeating an earlier one is where it starts and how long.
const (
	wordBits   = 8
	runBits    = 1
	repeatBits = 8
	minRepeat  = 4 // the shortest repeated stretch counted as one
	maxRated   = 512
)

// tokenStrength estimates tok's entropy in bits: each character is worth
// log2 of the union of the character classes the token uses (26 lower,
// 26 upper, 10 digits, 33 other), less for what commonWords, runs and
// repeats explain. It returns the estimate and what lowered it. Past
// maxRated bytes a token is not rated further.
func tokenStrength(tok string) (bits float64, flaws []string) {
	tok = tok[:min(len(tok), maxRated)]
	var lower, upper, digit, other bool
	for i := 0; i < len(tok); i++ {
		switch c := tok[i]; {
		case 'a' <= c && c <= 'z':
			lower = true
		case 'A' <= c && c <= 'Z':
			upper = true
		case '0' <= c && c <= '9':
			digit = true
		default:
			other = true
		}
	}
	alphabet := 0
	for _, c := range []struct {
		used bool
		size int
	}{{lower, 26}, {upper, 26}, {digit, 10}, {other, 33}} {
		if c.used {
			alphabet += c.size
		}
	}
	perChar := math.Log2(float64(max(alphabet, 2)))
	folded := strings.ToLower(tok)
	seen := map[string]bool{}
	flaw := func(f string) {
		if !seen[f] {
			seen[f] = true
			flaws = append(flaws, f)
		}
	}
	for i := 0; i < len(tok); {
		if w := wordAt(folded, i); w != "" {
			bits += wordBits
			flaw(fmt.Sprintf("the word %q", w))
			i += len(w)
			continue
		}
		if n := repeatAt(tok, i); n > 0 {
			bits += repeatBits
			flaw("repeated characters")
			i += n
			continue
		}
		if i >= 2 {
			if d := int(tok[i]) - int(tok[i-1]); d >= -1 && d <= 1 && d == int(tok[i-1])-int(tok[i-2]) {
				bits += runBits
				if d == 0 {
					flaw("repeated characters")
				} else {
					flaw("a sequence")
				}
				i++
				continue
			}
		}
		bits += perChar
		i++
	}
	if len(flaws) == 0 && bits < minTokenBits {
		flaw("too short")
	}
	return bits, flaws
}

// wordAt is the longest of commonWords that folded has at i, or "".
func wordAt(folded string, i int) string {
	best := ""
	for _, w := range commonWords {
		if len(w) > len(best) && strings.HasPrefix(folded[i:], w) {
			best = w
		}
	}
	return best
}

// repeatAt is the length of the longest stretch at i, at least minRepeat
// long, that also starts earlier in s (the two may overlap, so "aaaaaa"
// repeats from its second character), or 0.
func repeatAt(s string, i int) int {
	n := 0
	for l := minRepeat; i+l <= len(s) && strings.Contains(s[:i+l-1], s[i:i+l]); l++ {
		n = l
	}
	return n
}
