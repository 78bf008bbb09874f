package jetstream

import (
	"fmt"
	"strconv"
	"strings"
)

// byteUnits are the units ParseByteSize takes, the longer suffixes first.
var byteUnits = []struct {
	suffix string
	factor int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
}

// ParseByteSize parses a size, such as StreamSettings.MaxBytes: a number
// of bytes, or one with a unit (KB, MB, GB, TB: powers of 1000; KiB, MiB,
// GiB, TiB: of 1024; K, M, G, T alone: of 1024), in any case, spaces
// around it ignored.
func ParseByteSize(text string) (int64, error) {
	s := strings.TrimSpace(text)
	factor := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(strings.ToUpper(s), strings.ToUpper(u.suffix)) {
			s, factor = strings.TrimSpace(s[:len(s)-len(u.suffix)]), u.factor
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > (1<<62)/factor {
		return 0, fmt.Errorf("%q is not a size: use bytes, or a number with KB, MB, GB, KiB, MiB or GiB", text)
	}
	return n * factor, nil
}
