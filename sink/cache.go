package sink

import "github.com/outbox-relay/outbox-relay/decode"

// subjectCache remembers rendered subjects: an outbox usually carries a
// handful of aggregate and event types, so most events reuse a subject
// rendered before. Guarded by the Publisher's sendMu.
type subjectCache struct {
	tpl Template
	m   map[subjectKey]string
}

type subjectKey struct{ aggregateType, aggregateID, eventType string }

// maxCached bounds the cache; values longer than maxCachedValue are
// rendered every time (they would only fill it).
const (
	maxCached      = 4096
	maxCachedValue = 64
)

func newSubjectCache(tpl Template) *subjectCache {
	return &subjectCache{tpl: tpl, m: make(map[subjectKey]string)}
}

func (c *subjectCache) render(ev *decode.Event) string {
	key := subjectKey{aggregateType: ev.AggregateType, eventType: ev.EventType}
	if c.tpl.usesAggregateID {
		key.aggregateID = ev.AggregateID
	}
	if len(key.aggregateType) > maxCachedValue || len(key.aggregateID) > maxCachedValue || len(key.eventType) > maxCachedValue {
		return c.tpl.Render(ev)
	}
	if s, ok := c.m[key]; ok {
		return s
	}
	if len(c.m) >= maxCached {
		clear(c.m)
	}
	s := c.tpl.Render(ev)
	// The key's strings point into the event's buffer: keep copies instead,
	// so the cache does not hold events' payloads alive.
	key = subjectKey{aggregateType: clone(key.aggregateType), aggregateID: clone(key.aggregateID), eventType: clone(key.eventType)}
	c.m[key] = s
	return s
}

func clone(s string) string { return string(append([]byte(nil), s...)) }
