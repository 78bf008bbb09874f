package contract

import "testing"

func TestCheckID(t *testing.T) {
	for _, good := range []string{"a", "0b6f9a1c-3d2e-4f5a-8b7c-9d0e1f2a3b4c", "order:42#1", "é"} {
		if p := CheckID(good); p != "" {
			t.Errorf("CheckID(%q) = %q, want \"\"", good, p)
		}
		if p := CheckID([]byte(good)); p != "" {
			t.Errorf("CheckID([]byte(%q)) = %q, want \"\"", good, p)
		}
	}
	for _, bad := range []string{"", " id", "id ", "i d", "id\n", "id\r", "\tid", "id\x00", "id\x7f"} {
		if p := CheckID(bad); p == "" {
			t.Errorf("CheckID(%q) = \"\", want a problem", bad)
		}
		if p := CheckID([]byte(bad)); p == "" {
			t.Errorf("CheckID([]byte(%q)) = \"\", want a problem", bad)
		}
	}
}

func TestDeadLetterMsgID(t *testing.T) {
	for id, want := range map[string]string{
		"0b6f9a1c-3d2e-4f5a-8b7c-9d0e1f2a3b4c": "dead-letter:0b6f9a1c-3d2e-4f5a-8b7c-9d0e1f2a3b4c",
		"0/10#2":                               "dead-letter:0/10#2",
	} {
		if got := DeadLetterMsgID(id); got != want {
			t.Errorf("DeadLetterMsgID(%q) = %q, want %q", id, got, want)
		}
	}
}
