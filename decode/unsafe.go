package decode

import "unsafe"

// unsafeString views b as a string without copying. Callers guarantee b is
// never written again: it is a private copy owned by one Event.
func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
