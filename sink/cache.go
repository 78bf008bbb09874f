package sink

import "github.com/outbox-relay/outbox-relay/decode"

// SubjectCache remembers rendered subjects: an outbox usually carries a
// handful of aggregate and event types, so most events reuse a subject
// rendered before. A template with {aggregate_id} is rendered every time:
// aggregate ids rarely repeat soon enough to pay for the cache. Guarded
// by its user: not safe for concurrent use.
type SubjectCache struct {
	tpl Template
	m   map[subjectKey]string
}

type subjectKey struct{ aggregateType, eventType string }

// maxCached bounds the cache; values longer than maxCachedValue are
// rendered every time (they would only fill it).
const (
	maxCached      = 4096
	maxCachedValue = 64
)

func NewSubjectCache(tpl Template) *SubjectCache {
	return &SubjectCache{tpl: tpl, m: make(map[subjectKey]string)}
}

func (c *SubjectCache) Render(ev *decode.Event) string {
	if c.tpl.usesAggregateID || len(ev.AggregateType) > maxCachedValue || len(ev.EventType) > maxCachedValue {
		return c.tpl.Render(ev)
	}
	key := subjectKey{aggregateType: ev.AggregateType, eventType: ev.EventType}
	if s, ok := c.m[key]; ok {
		return s
	}
	if len(c.m) >= maxCached {
		clear(c.m)
	}
	s := c.tpl.Render(ev)
	// The key's strings point into the event's buffer: keep copies instead,
	// so the cache does not hold events' payloads alive.
	c.m[subjectKey{aggregateType: clone(key.aggregateType), eventType: clone(key.eventType)}] = s
	return s
}

func clone(s string) string { return string(append([]byte(nil), s...)) }
