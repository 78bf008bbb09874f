package decode

import (
	"encoding/hex"
	"errors"
	"time"
)

// formatTimestamp turns Postgres timestamp text output (DateStyle ISO) into
// RFC 3339 in UTC: "2026-12-02 11:36:09.12+00" becomes
// "2026-12-02T11:36:09.12Z". A timestamp without time zone is read as UTC.
// Values RFC 3339 cannot express (infinity, BC dates) are returned as is.
func formatTimestamp(s []byte) []byte { return appendTimestamp(nil, s) }

// appendTimestamp appends formatTimestamp(s) to dst.
func appendTimestamp(dst, s []byte) []byte {
	if len(s) < 19 || s[4] != '-' || s[7] != '-' || s[10] != ' ' || s[13] != ':' || s[16] != ':' {
		return append(dst, s...)
	}
	end := 19
	if end < len(s) && s[end] == '.' {
		end++
		for end < len(s) && s[end] >= '0' && s[end] <= '9' {
			end++
		}
	}
	if zone := s[end:]; len(zone) == 0 || string(zone) == "+00" {
		dst = append(dst, s[:10]...)
		dst = append(dst, 'T')
		dst = append(dst, s[11:end]...)
		return append(dst, 'Z')
	}
	for _, layout := range []string{"2006-01-02 15:04:05.999999999-07", "2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05.999999999-07:00:00"} {
		if t, err := time.Parse(layout, string(s)); err == nil {
			return t.UTC().AppendFormat(dst, time.RFC3339Nano)
		}
	}
	return append(dst, s...)
}

// decodeByteaHex decodes bytea text output in hex format (\x0102...).
func decodeByteaHex(s []byte) ([]byte, error) {
	if len(s) < 2 || s[0] != '\\' || s[1] != 'x' {
		return nil, errors.New(`bytea value is not in hex format (set bytea_output = 'hex')`)
	}
	out := make([]byte, hex.DecodedLen(len(s)-2))
	if _, err := hex.Decode(out, s[2:]); err != nil {
		return nil, errors.New("bytea value has invalid hex digits")
	}
	return out, nil
}
