package adapters

import (
	"math"
	"strconv"
	"unicode/utf8"
	"unsafe"

	"github.com/valyala/fastjson"
)

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s as a JSON string literal. Control characters
// are escaped and invalid UTF-8 becomes U+FFFD, so the output is always
// valid JSON (strconv.Quote's Go escapes such as \a are not).
func AppendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendJSONValue appends v as JSON. It replaces fastjson's MarshalTo for
// a request going upstream: MarshalTo writes every string and key that
// fastjson has unescaped (the cache key reads them all) with
// strconv.AppendQuote, whose \a, \v, \x00 and \U000e0067 are not JSON, so
// an engine would refuse the body, or read something else than the cache.
func AppendJSONValue(dst []byte, v *fastjson.Value) []byte {
	switch v.Type() {
	case fastjson.TypeObject:
		o, _ := v.Object()
		dst = append(dst, '{')
		n := 0
		o.Visit(func(k []byte, e *fastjson.Value) {
			if n > 0 {
				dst = append(dst, ',')
			}
			n++
			dst = append(AppendJSONString(dst, bytesString(k)), ':')
			dst = AppendJSONValue(dst, e)
		})
		return append(dst, '}')
	case fastjson.TypeArray:
		dst = append(dst, '[')
		for i, e := range v.GetArray() {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendJSONValue(dst, e)
		}
		return append(dst, ']')
	case fastjson.TypeString:
		return AppendJSONString(dst, bytesString(v.GetStringBytes()))
	case fastjson.TypeNumber:
		return appendNumber(dst, v)
	default: // true, false, null
		return v.MarshalTo(dst)
	}
}

// appendNumber appends a number as written when that is a JSON number (a
// request's always is: it was checked). fastjson also reads NaN, inf, +1,
// .5 and 01 as numbers; those are written as the float64 they stand for,
// and NaN and the infinities as null.
func appendNumber(dst []byte, v *fastjson.Value) []byte {
	start := len(dst)
	dst = v.MarshalTo(dst)
	if validJSONNumber(dst[start:]) {
		return dst
	}
	f, err := strconv.ParseFloat(string(dst[start:]), 64)
	if err != nil {
		f = math.NaN()
	}
	return AppendJSONFloat(dst[:start], f, 64)
}

// AppendJSONFloat appends f as the shortest decimal that reads back as the
// float of bitSize (32 or 64) it is. JSON has no NaN or infinity: those are
// written as null, as JavaScript's JSON.stringify does, never as NaN or
// +Inf, which no JSON reader takes.
func AppendJSONFloat(dst []byte, f float64, bitSize int) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, bitSize)
}

// validJSONNumber reports whether s is a number in JSON's grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func validJSONNumber(s []byte) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i = skipDigits(s, i)
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		j := skipDigits(s, i+1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := skipDigits(s, i)
		if j == i {
			return false
		}
		i = j
	}
	return i == len(s)
}

func skipDigits(s []byte, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// bytesString views b as a string, for a read that ends before b changes.
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
