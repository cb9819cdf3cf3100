package etl

// PostgreSQL limits of the numeric type, which jsonb numbers are: at most
// 131,072 digits before the decimal point and 16,383 after it.
const (
	maxNumericIntegerDigits  = 131072
	maxNumericFractionDigits = 16383
)

// loadable reports whether raw, one valid JSON value, can be stored by
// PostgreSQL as jsonb and its strings as text: no string, at any depth,
// holds a \u0000 escape (text cannot store NUL) or a UTF-16 surrogate escape
// that is not part of a high-low pair (jsonb refuses it), and every number
// fits the numeric type. raw must already be valid JSON (the parser checked
// it); loadable only looks at escapes and number literals.
func loadable(raw []byte) bool {
	for i := 0; i < len(raw); {
		switch c := raw[i]; {
		case c == '"':
			end, ok := loadableString(raw, i+1)
			if !ok {
				return false
			}
			i = end
		case c == '-' || (c >= '0' && c <= '9'):
			end := i + 1
			for end < len(raw) && isNumberByte(raw[end]) {
				end++
			}
			if !numericFits(raw[i:end]) {
				return false
			}
			i = end
		default:
			i++
		}
	}
	return true
}

func isNumberByte(c byte) bool {
	return c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' || (c >= '0' && c <= '9')
}

// loadableString checks the string literal whose content starts at i and
// returns the index just past its closing quote.
func loadableString(raw []byte, i int) (int, bool) {
	pendingHigh := false // the previous escape was a high surrogate
	for i < len(raw) {
		c := raw[i]
		if c == '"' {
			return i + 1, !pendingHigh
		}
		if c != '\\' {
			if pendingHigh {
				return 0, false
			}
			i++
			continue
		}
		if i+1 >= len(raw) {
			return 0, false
		}
		if raw[i+1] != 'u' {
			if pendingHigh {
				return 0, false
			}
			i += 2
			continue
		}
		if i+6 > len(raw) {
			return 0, false
		}
		r, ok := hex4(raw[i+2 : i+6])
		if !ok {
			return 0, false
		}
		switch {
		case r == 0:
			return 0, false
		case r >= 0xD800 && r <= 0xDBFF:
			if pendingHigh {
				return 0, false
			}
			pendingHigh = true
		case r >= 0xDC00 && r <= 0xDFFF:
			if !pendingHigh {
				return 0, false
			}
			pendingHigh = false
		default:
			if pendingHigh {
				return 0, false
			}
		}
		i += 6
	}
	return 0, false
}

func hex4(b []byte) (rune, bool) {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return r, true
}

// numericFits reports whether the JSON number literal num fits PostgreSQL's
// numeric type: its digits before the decimal point (after applying the
// exponent, leading zeros aside) at most 131,072, and its scale (digits
// after the point, trailing zeros kept, as numeric keeps them) at most
// 16,383. Zero fits with any exponent that leaves the scale in range.
func numericFits(num []byte) bool {
	i := 0
	if i < len(num) && num[i] == '-' {
		i++
	}
	intStart := i
	for i < len(num) && num[i] >= '0' && num[i] <= '9' {
		i++
	}
	intDigits := num[intStart:i]
	var fracDigits []byte
	if i < len(num) && num[i] == '.' {
		i++
		fracStart := i
		for i < len(num) && num[i] >= '0' && num[i] <= '9' {
			i++
		}
		fracDigits = num[fracStart:i]
	}
	exp := 0
	if i < len(num) && (num[i] == 'e' || num[i] == 'E') {
		i++
		neg := false
		if i < len(num) && (num[i] == '+' || num[i] == '-') {
			neg = num[i] == '-'
			i++
		}
		for ; i < len(num); i++ {
			// Saturate: anything this large is out of range either way.
			if exp < 10_000_000 {
				exp = exp*10 + int(num[i]-'0')
			}
		}
		if neg {
			exp = -exp
		}
	}
	scale := max(0, len(fracDigits)-exp)
	if scale > maxNumericFractionDigits {
		return false
	}
	// Position of the first significant digit in intDigits+fracDigits.
	first := -1
	for k, c := range intDigits {
		if c != '0' {
			first = k
			break
		}
	}
	if first < 0 {
		for k, c := range fracDigits {
			if c != '0' {
				first = len(intDigits) + k
				break
			}
		}
	}
	if first < 0 {
		return true // zero
	}
	integerDigits := len(intDigits) + exp - first
	return integerDigits <= maxNumericIntegerDigits
}
