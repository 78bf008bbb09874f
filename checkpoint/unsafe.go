package checkpoint

import "unsafe"

// unsafeString returns b as a string without copying, for a comparison
// that keeps no reference to it.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
