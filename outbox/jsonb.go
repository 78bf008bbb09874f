package outbox

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Limits of Postgres's numeric type, which jsonb stores numbers as: at most
// 131072 digits before the decimal point and 16383 after it.
const (
	maxNumericIntDigits = 131072
	maxNumericScale     = 16383
)

// jsonbSize returns the length of text (valid JSON, valid UTF-8) once
// stored as jsonb and printed back, as the relay reads and publishes it:
// no whitespace except one space after each ':' and ',', strings with
// escapes resolved (only '"', '\\' and control characters escaped),
// numbers in plain notation. Duplicate keys, which jsonb drops, are
// counted, so the result is never below the real length.
//
// It fails for what jsonb refuses: \u0000, a lone UTF-16 surrogate, a
// number beyond numeric's range.
func jsonbSize(text []byte) (int, error) {
	size := 0
	for i := 0; i < len(text); {
		switch c := text[i]; c {
		case ' ', '\t', '\n', '\r':
			i++
		case ',', ':':
			size += 2
			i++
		case '{', '}', '[', ']':
			size++
			i++
		case '"':
			n, end, err := jsonbStringSize(text, i)
			if err != nil {
				return 0, err
			}
			size += n
			i = end
		default: // a number or true, false, null
			end := i
			for end < len(text) && !isDelimiter(text[end]) {
				end++
			}
			tok := text[i:end]
			if c == 't' || c == 'f' || c == 'n' {
				size += len(tok)
			} else {
				n, err := numericSize(tok)
				if err != nil {
					return 0, err
				}
				size += n
			}
			i = end
		}
	}
	return size, nil
}

func isDelimiter(c byte) bool {
	switch c {
	case ',', ':', '{', '}', '[', ']', ' ', '\t', '\n', '\r', '"':
		return true
	}
	return false
}

// jsonbStringSize measures the string starting with the quote at text[start]
// and returns its printed length and the index after its closing quote.
func jsonbStringSize(text []byte, start int) (size, end int, err error) {
	size = 2 // the quotes
	for i := start + 1; i < len(text); {
		c := text[i]
		switch {
		case c == '"':
			return size, i + 1, nil
		case c != '\\':
			size++
			i++
			continue
		}
		switch text[i+1] {
		case '/':
			size++ // printed unescaped
			i += 2
			continue
		case 'u':
		default: // \" \\ \b \f \n \r \t stay as they are
			size += 2
			i += 2
			continue
		}
		r := hex4(text[i+2 : i+6])
		i += 6
		switch {
		case r == 0:
			return 0, 0, errors.New(`contains \u0000, which Postgres jsonb cannot store`)
		case utf16.IsSurrogate(r) && r < 0xdc00:
			if i+6 > len(text) || text[i] != '\\' || text[i+1] != 'u' {
				return 0, 0, fmt.Errorf(`contains the high surrogate \u%04x without a low surrogate after it, which Postgres jsonb refuses`, r)
			}
			low := hex4(text[i+2 : i+6])
			if low < 0xdc00 || low > 0xdfff {
				return 0, 0, fmt.Errorf(`contains the high surrogate \u%04x without a low surrogate after it, which Postgres jsonb refuses`, r)
			}
			size += utf8.RuneLen(utf16.DecodeRune(r, low))
			i += 6
		case utf16.IsSurrogate(r):
			return 0, 0, fmt.Errorf(`contains the low surrogate \u%04x without a high surrogate before it, which Postgres jsonb refuses`, r)
		case r == '"' || r == '\\' || r == '\b' || r == '\f' || r == '\n' || r == '\r' || r == '\t':
			size += 2
		case r < 0x20:
			size += 6 // \u00XX
		default:
			size += utf8.RuneLen(r)
		}
	}
	return 0, 0, errors.New("has an unterminated string") // not reached for valid JSON
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// numericSize returns the length of the JSON number tok as numeric prints
// it: plain notation, as many fraction digits as the input had minus the
// exponent, no sign for zero.
func numericSize(tok []byte) (int, error) {
	s := string(tok)
	negative := s[0] == '-'
	if negative {
		s = s[1:]
	}
	mantissa, exp := s, 0
	for i := 0; i < len(s); i++ {
		if s[i] == 'e' || s[i] == 'E' {
			e, err := strconv.Atoi(s[i+1:])
			if err != nil || e > 1<<30 || e < -(1<<30) {
				return 0, fmt.Errorf("has the number %s, beyond the range of Postgres numeric", tok)
			}
			mantissa, exp = s[:i], e
			break
		}
	}
	intPart, fracPart := mantissa, ""
	for i := 0; i < len(mantissa); i++ {
		if mantissa[i] == '.' {
			intPart, fracPart = mantissa[:i], mantissa[i+1:]
			break
		}
	}
	digits := intPart + fracPart
	point := len(intPart) + exp // digits[:point] is the integer part
	first := -1                 // the first non-zero digit
	for i := 0; i < len(digits); i++ {
		if digits[i] != '0' {
			first = i
			break
		}
	}
	intDigits := 1 // "0"
	if first >= 0 && first < point {
		intDigits = point - first
	}
	scale := max(len(fracPart)-exp, 0)
	if intDigits > maxNumericIntDigits || scale > maxNumericScale {
		return 0, fmt.Errorf("has the number %.40s, beyond the range of Postgres numeric (%d digits before the point, %d after)", tok, maxNumericIntDigits, maxNumericScale)
	}
	size := intDigits
	if scale > 0 {
		size += 1 + scale
	}
	if negative && first >= 0 {
		size++
	}
	return size, nil
}
