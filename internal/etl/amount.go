package etl

import "strings"

// Limits of an AMOUNT value.
const (
	// MaxAmountDigits is the maximum number of significant digits of an AMOUNT as written
	// (leading zeros do not count, trailing zeros do: "1.50" has 3).
	MaxAmountDigits = 38
	// maxRoundedDigits is the digit count of the largest rounded amount times 100:
	// |amount| < 1e18 after rounding means |amount*100| < 1e20, i.e. at most 20 digits.
	maxRoundedDigits = 20
)

// normalizeAmount parses an AMOUNT and returns it rounded half-up (ties away from zero) to
// exactly two decimal places, e.g. "999.9" -> "999.90", "-0.005" -> "-0.01", "-0.001" ->
// "0.00". number selects the grammar: a JSON number (already well-formed, exponent allowed)
// or the text of a JSON string, which must be a plain decimal -?[0-9]+(\.[0-9]+)? with no
// exponent, sign '+', white space or bare point. ok is false for anything else, for more than
// MaxAmountDigits significant digits and for |rounded| >= 1e18. The arithmetic is exact
// decimal string arithmetic; no floating point is involved.
func normalizeAmount(text string, number bool) (string, bool) {
	neg := false
	s := text
	if strings.HasPrefix(s, "-") {
		neg = true
		s = s[1:]
	}
	intPart, frac, exp := s, "", ""
	if i := strings.IndexAny(intPart, "eE"); i >= 0 {
		if !number {
			return "", false
		}
		intPart, exp = intPart[:i], intPart[i+1:]
		if exp == "" {
			return "", false
		}
	}
	if i := strings.IndexByte(intPart, '.'); i >= 0 {
		intPart, frac = intPart[:i], intPart[i+1:]
		if frac == "" {
			return "", false
		}
	}
	if intPart == "" || !allDigits(intPart) || !allDigits(frac) {
		return "", false
	}

	// digits = significant digits of intPart+frac; value = digits * 10^scale.
	mantissa := strings.TrimLeft(intPart+frac, "0")
	if len(mantissa) > MaxAmountDigits {
		return "", false
	}
	e, ok := parseExponent(exp)
	if !ok {
		return "", false
	}
	if mantissa == "" {
		return "0.00", true // zero in any spelling, whatever the exponent
	}
	// Rounded result R = round(value * 100) = round(mantissa * 10^shift).
	shift := e - len(frac) + 2
	var r string
	switch {
	case shift >= 0:
		if len(mantissa)+shift > maxRoundedDigits {
			return "", false
		}
		r = mantissa + strings.Repeat("0", shift)
	default:
		keep := len(mantissa) + shift // digits left of the rounding point
		switch {
		case keep < 0:
			r = "0"
		case keep == 0:
			r = "0"
			if mantissa[0] >= '5' {
				r = "1"
			}
		default:
			r = mantissa[:keep]
			if mantissa[keep] >= '5' {
				r = increment(r)
			}
		}
	}
	r = strings.TrimLeft(r, "0")
	if len(r) > maxRoundedDigits {
		return "", false
	}
	if r == "" {
		return "0.00", true // no negative zero
	}
	if len(r) < 3 {
		r = strings.Repeat("0", 3-len(r)) + r
	}
	out := r[:len(r)-2] + "." + r[len(r)-2:]
	if neg {
		out = "-" + out
	}
	return out, true
}

// parseExponent parses the optional exponent of a JSON number. Exponents beyond ±1e9 are
// reported as ±1e9: the mantissa has at most MaxAmountDigits digits, so such a value is either
// out of range or rounds to zero, and the bound keeps the arithmetic in int range.
func parseExponent(exp string) (int, bool) {
	if exp == "" {
		return 0, true
	}
	sign := 1
	switch exp[0] {
	case '+':
		exp = exp[1:]
	case '-':
		sign = -1
		exp = exp[1:]
	}
	if exp == "" || !allDigits(exp) {
		return 0, false
	}
	exp = strings.TrimLeft(exp, "0")
	if len(exp) > 9 {
		return sign * 1_000_000_000, true
	}
	n := 0
	for i := 0; i < len(exp); i++ {
		n = n*10 + int(exp[i]-'0')
	}
	return sign * n, true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// increment adds one to a non-empty decimal digit string.
func increment(digits string) string {
	b := []byte(digits)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] != '9' {
			b[i]++
			return string(b)
		}
		b[i] = '0'
	}
	return "1" + string(b)
}
