package contract

import (
	"strconv"
	"strings"
)

// PercentDecode undoes the percent-encoding of a value listed in
// HeaderPercentEncoded: each %XX becomes its byte; anything else, a
// malformed escape included, is kept as it is.
func PercentDecode(v string) string {
	if !strings.Contains(v, "%") {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '%' && i+2 < len(v) {
			if n, err := strconv.ParseUint(v[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(n))
				i += 2
				continue
			}
		}
		b.WriteByte(v[i])
	}
	return b.String()
}
