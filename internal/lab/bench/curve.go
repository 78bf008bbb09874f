package bench

import "time"

// curvePoint is how many events a drain had stored some time after the
// relay's start.
type curvePoint struct {
	at     time.Duration
	stored uint64
}

// curve records a drain's progress for the HTML report, a point at most
// every curveStep so that a long drain stays a small chart.
type curve struct {
	started time.Time
	points  []curvePoint
}

const curveStep = 50 * time.Millisecond

func newCurve(started time.Time) *curve {
	return &curve{started: started, points: []curvePoint{{0, 0}}}
}

// add records stored now, unless the last point is too recent (the last
// count of a drain is always recorded by done).
func (c *curve) add(stored uint64) {
	at := time.Since(c.started)
	if last := c.points[len(c.points)-1]; at-last.at < curveStep || stored < last.stored {
		return
	}
	c.points = append(c.points, curvePoint{at, stored})
}

// done records the final count and returns the points.
func (c *curve) done(stored uint64) []curvePoint {
	c.points = append(c.points, curvePoint{time.Since(c.started), stored})
	return c.points
}
