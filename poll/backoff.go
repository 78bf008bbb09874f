package poll

import "time"

// Delay is how long a row waits before its next try after its attempt-th
// rejection (1 for the first): base doubled for each earlier rejection,
// capped at max.
func Delay(attempt int, base, max time.Duration) time.Duration {
	d := base
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}
