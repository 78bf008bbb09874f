package contract

import (
	"fmt"
	"strconv"
	"strings"
)

// ByteSize is a size in bytes as every byte-sized flag takes it
// (--window-bytes, --max-lag-bytes, --stream-max-bytes): plain bytes, or
// a whole number with a unit: KB, MB, GB, TB (powers of 1000); KiB, MiB,
// GiB, TiB, or K, M, G, T (powers of 1024); B. Units ignore case, so 1k
// is 1 KiB and 1kb 1000 bytes. It is never negative.
type ByteSize int64

var byteUnits = []struct {
	suffix string
	factor int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
}

// ParseByteSize parses a size (see ByteSize).
func ParseByteSize(text string) (ByteSize, error) {
	s := strings.TrimSpace(text)
	factor := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(strings.ToUpper(s), strings.ToUpper(u.suffix)) {
			s, factor = strings.TrimSpace(s[:len(s)-len(u.suffix)]), u.factor
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err == nil && n < 0:
		return 0, fmt.Errorf("%q: a size must not be negative", text)
	case err != nil || n > (1<<62)/factor:
		return 0, fmt.Errorf("%q is not a size: use bytes, or a whole number with KB, MB, GB, KiB, MiB or GiB (64MiB, 1k, 1KB)", text)
	}
	return ByteSize(n * factor), nil
}

// UnmarshalText parses a size: a flag of type ByteSize takes units.
func (b *ByteSize) UnmarshalText(text []byte) error {
	v, err := ParseByteSize(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// String writes the size exactly, in the largest binary unit that holds
// it whole (64MiB; 1536 is not a whole KiB: 1536B), or in
// bytes; ParseByteSize reads it back. 0 is "0".
func (b ByteSize) String() string {
	if b == 0 {
		return "0"
	}
	for i := 3; i >= 0; i-- { // TiB down to KiB
		u := byteUnits[i]
		if int64(b)%u.factor == 0 {
			return strconv.FormatInt(int64(b)/u.factor, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// MarshalText writes the size as String does.
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(b.String()), nil }
