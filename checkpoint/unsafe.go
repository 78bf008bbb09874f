package checkpoint

import "unsafe"

// unsafeString returns b as a string without copying; b must never change
// afterwards (TableHoldings' arena only grows into new blocks).
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
