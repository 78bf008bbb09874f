// Package jsoncheck checks the --json output of the operator commands
// against the style docs/json.md promises: snake_case keys, LSNs in
// Postgres text form (never integers), no zero times, no nulls. Tests of the
// packages whose reports are printed as JSON run their reports through
// it.
package jsoncheck

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

var (
	snake = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	lsn   = regexp.MustCompile(`^[0-9A-F]{1,8}/[0-9A-F]{1,8}$`)
)

// Check returns what in data breaks the style, one line each, with the
// path of the value; nil when nothing does. dataKeys are the paths (as
// Check writes them, "duplicates", "findings[].x") of objects whose keys
// are data, such as event ids, rather than field names.
func Check(data []byte, dataKeys ...string) []string {
	var v any
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return []string{"not JSON: " + err.Error()}
	}
	c := checker{data: map[string]bool{}}
	for _, k := range dataKeys {
		c.data[k] = true
	}
	c.walk("", "", v)
	return c.problems
}

type checker struct {
	data     map[string]bool
	problems []string
}

func (c *checker) add(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

func (c *checker) walk(path, key string, v any) {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !c.data[path] && !snake.MatchString(k) {
				c.add("%s: key %q is not snake_case", join(path, k), k)
			}
			c.walk(join(path, k), k, v[k])
		}
	case []any:
		for _, e := range v {
			c.walk(path+"[]", key, e)
		}
	case nil:
		c.add("%s: null; leave an optional field out, write an empty list as []", path)
	case json.Number:
		if isLSNKey(key) {
			c.add("%s: an LSN as a number (%s); write it as Postgres does, 0/16B3748", path, v)
		}
	case string:
		if strings.HasPrefix(v, "0001-01-01") {
			c.add("%s: a zero time (%s); leave it out", path, v)
		}
		if isLSNKey(key) && v != "" && !lsn.MatchString(v) {
			c.add("%s: %q is not an LSN in Postgres text form", path, v)
		}
	}
}

// isLSNKey reports whether a key names an LSN: lsn, or ending in _lsn.
func isLSNKey(k string) bool { return k == "lsn" || strings.HasSuffix(k, "_lsn") }

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}
