package jsoncheck

import "testing"

func TestCheck(t *testing.T) {
	good := `{"slot":"s","confirmed_flush_lsn":"0/16B3748","items":[{"event_id":"x"}],"duplicates":{"Id-1":2}}`
	if p := Check([]byte(good), "duplicates"); p != nil {
		t.Errorf("good JSON: %v", p)
	}
	for _, bad := range []string{
		`{"CreatedLSN":"0/1"}`,
		`{"created_lsn":123}`,
		`{"record":{"commit_lsn":"123"}}`,
		`{"list":[{"at":"0001-01-01T00:00:00Z"}]}`,
		`{"duplicates":{"Id-1":2}}`,
		`{"missing":null}`,
		`not json`,
	} {
		if p := Check([]byte(bad)); len(p) == 0 {
			t.Errorf("%s passes", bad)
		}
	}
}
