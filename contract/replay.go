package contract

import (
	"fmt"
	"strings"
)

// ReplayMsgIDPrefix starts the Nats-Msg-Id of every copy `replay`
// publishes (ReplayMsgID).
const ReplayMsgIDPrefix = "replay/"

// maxRunID is the longest replay run id accepted.
const maxRunID = 64

// ReplayMsgID returns the Nats-Msg-Id of the copy of the event with
// msgID (its message id: qualified by its table for a relay of several)
// published by the replay run runID: replay/<run id>/<msg id>. JetStream
// never drops it as a duplicate of the original, whose id it cannot be,
// nor of another run's copy; a rerun of the same run (the same run id)
// gives the same ids, so JetStream drops what the interrupted run already
// stored within the stream's duplicate window.
func ReplayMsgID(runID, msgID string) string { return ReplayMsgIDPrefix + runID + "/" + msgID }

// SplitReplayMsgID returns the run id and the event's message id of a
// copy's Nats-Msg-Id; ok is false for any other id.
func SplitReplayMsgID(id string) (runID, msgID string, ok bool) {
	rest, ok := strings.CutPrefix(id, ReplayMsgIDPrefix)
	if !ok {
		return "", "", false
	}
	runID, msgID, ok = strings.Cut(rest, "/")
	if !ok || CheckRunID(runID) != nil || msgID == "" {
		return "", "", false
	}
	return runID, msgID, true
}

// CheckRunID says why id cannot be a replay run id: 1 to 64 letters,
// digits, '-' and '_' (a run id is part of every copy's Nats-Msg-Id, and
// '/' ends it).
func CheckRunID(id string) error {
	if id == "" || len(id) > maxRunID {
		return fmt.Errorf("run id %q: want 1 to %d letters, digits, '-' or '_'", id, maxRunID)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("run id %q: %q is not allowed; use letters, digits, '-' or '_'", id, c)
		}
	}
	return nil
}
