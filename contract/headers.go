package contract

import (
	"fmt"
	"strings"
)

// Header names on every message the relay publishes. Other tools rely on
// them; keep them stable.
const (
	// HeaderMsgID is JetStream's deduplication header. Its value is the
	// event id; a dead letter's is DeadLetterMsgID of it.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderAggregateType is the row's aggregate_type, unchanged.
	HeaderAggregateType = "Outbox-Aggregate-Type"
	// HeaderAggregateID is the row's aggregate_id, unchanged.
	HeaderAggregateID = "Outbox-Aggregate-Id"
	// HeaderEventType is the row's event_type, unchanged.
	HeaderEventType = "Outbox-Event-Type"
	// HeaderCreatedAt is the row's created_at in RFC 3339, UTC; absent
	// when the row has none.
	HeaderCreatedAt = "Outbox-Created-At"
	// HeaderCommitLSN is the commit LSN of the event's transaction, in
	// Postgres text form (0/1A2B3C4).
	HeaderCommitLSN = "Outbox-Commit-Lsn"
	// HeaderTable is the outbox table the event was inserted into, as
	// schema.table; absent for a table-less event (a logical decoding
	// message). See HeaderSourceTable for why both are kept.
	HeaderTable = "Outbox-Table"
	// HeaderTxnIndex is the event's index within its transaction.
	HeaderTxnIndex = "Outbox-Txn-Index"
	// HeaderPercentEncoded lists, comma-separated, the headers whose
	// values are percent-encoded because a header could not carry them
	// exactly.
	HeaderPercentEncoded = "Outbox-Percent-Encoded"

	// The source of every message: which WAL, and which slot's reading of
	// it, the event was decoded from.

	// HeaderSourceSystem is the Postgres system identifier, in decimal.
	HeaderSourceSystem = "Outbox-Source-System"
	// HeaderSourceTimeline is the timeline the relay streamed on.
	HeaderSourceTimeline = "Outbox-Source-Timeline"
	// HeaderSourceSlot is the replication slot's name.
	HeaderSourceSlot = "Outbox-Source-Slot"
	// HeaderSourceOrigin is the slot's creation point (an LSN); absent
	// while it is not known.
	HeaderSourceOrigin = "Outbox-Source-Origin"
	// HeaderSourceDatabase is the database the outbox table is in
	// (percent-encoded when it holds '%' or what a header cannot carry).
	HeaderSourceDatabase = "Outbox-Source-Database"
	// HeaderSourceTable is the outbox table the event comes from,
	// schema.table: from a relay of several tables, the event's own (a
	// table-less event's: the relay's first table). With the system and
	// the database it is the space the event's id is unique in: what the
	// stream holds is decided by it, whatever the slot.
	//
	// For a row's event it holds what HeaderTable holds, and both are
	// kept on purpose: they are read differently. HeaderTable is the
	// event's table as consumers, verify and subjects see it, and is
	// absent on a table-less event (a logical decoding message).
	// HeaderSourceTable is part of the event's source, read by the resume
	// logic (sink.Source.SameTable: Holdings, TableHoldings, the tail a
	// restart reads back), which takes a message without it for one of a
	// relay older than the Outbox-Source-* headers and then falls back to
	// comparing slot names. Folding one into the other would either put a
	// table on table-less events (breaking HeaderTable's readers) or strip
	// the table from the source of table-less events (making the resume
	// logic take them for an older relay's).
	HeaderSourceTable = "Outbox-Source-Table"

	// HeaderReplay marks a message published again from the table by
	// hand, outside any slot's order (verify --republish, dlq retry,
	// replay): its value says which. Such a message never tells a relay
	// where its replay starts.
	HeaderReplay = "Outbox-Replay"

	// HeaderAtomicFallback marks an event of a transaction that, with
	// atomic transactions on (run --atomic-transactions), was not published
	// as one atomic batch: its value says why (more events than a batch
	// holds, a dead letter among them, a refusal). Consumers may see part
	// of such a transaction before the rest.
	HeaderAtomicFallback = "Outbox-Atomic-Fallback"

	// Dead-letter messages carry these as well.

	// HeaderEventID is the event id of a dead letter, as the row holds
	// it (percent-encoded when a header could not carry it exactly; cut
	// at MaxDeadLetterValue bytes).
	HeaderEventID = "Outbox-Event-Id"
	// HeaderDeadLetterReason says why the event was dead-lettered.
	HeaderDeadLetterReason = "Outbox-Dead-Letter-Reason"
	// HeaderOriginalSubject is the subject the event would have had.
	HeaderOriginalSubject = "Outbox-Original-Subject"
	// HeaderPayloadOmitted, when present, says why the dead letter lacks
	// the event's payload.
	HeaderPayloadOmitted = "Outbox-Payload-Omitted"
)

// MaxDeadLetterValue is the most bytes of a row's id or of the reason a
// dead letter's Outbox-Event-Id and Outbox-Dead-Letter-Reason carry; a
// longer value is cut there and "…" appended.
const MaxDeadLetterValue = 1 << 10

// Bounds of an event's own headers: together with the relay's headers
// they stay far below JetStream's 64 KiB header limit, also when every
// byte is percent-encoded, so that the event, or at worst its dead letter,
// can always be stored.
const (
	// MaxHeaders is the most headers an event may carry.
	MaxHeaders = 32
	// MaxHeaderValue is the most bytes of one header value.
	MaxHeaderValue = 4 << 10
	// MaxHeaderBytes is the most bytes of all names and values of an
	// event's headers.
	MaxHeaderBytes = 12 << 10
)

// reservedHeaderNames are names nats.go itself interprets on a message
// (a status message's code and description).
var reservedHeaderNames = []string{"status", "description"}

// maxHeaderName is the longest header name accepted.
const maxHeaderName = 128

// reservedHeaderPrefixes are the header namespaces of NATS and of the
// relay: an event's own headers may not set them (a Nats-Msg-Id of the
// row's choosing would defeat deduplication).
var reservedHeaderPrefixes = []string{"nats-", "outbox-"}

// CheckHeaderName says why name cannot be the name of an event's own
// header: a header name is 1 to 128 characters of an HTTP token
// (letters, digits and !#$%&'*+-.^_`|~); the Nats- and Outbox- prefixes
// belong to NATS and to the relay, Status and Description to NATS
// clients.
func CheckHeaderName(name string) error {
	if name == "" || len(name) > maxHeaderName {
		return fmt.Errorf("header name %q: want 1 to %d characters", name, maxHeaderName)
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return fmt.Errorf("header name %q: %q is not allowed in a header name (letters, digits and !#$%%&'*+-.^_`|~)", name, name[i])
		}
	}
	lower := strings.ToLower(name)
	for _, r := range reservedHeaderNames {
		if lower == r {
			return fmt.Errorf("header name %q is reserved: NATS clients read it as a status message's", name)
		}
	}
	for _, p := range reservedHeaderPrefixes {
		if strings.HasPrefix(lower, p) {
			return fmt.Errorf("header name %q: names starting with %q are reserved for NATS and the relay", name, name[:len(p)])
		}
	}
	return nil
}

func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// The values of HeaderReplay: which command published the message again.
const (
	// ReplayRepublish is `verify --republish`.
	ReplayRepublish = "verify-republish"
	// ReplayRetry is `dlq retry`.
	ReplayRetry = "dlq-retry"
	// ReplayCopy is `replay`: a copy of an event already delivered,
	// republished for consumers that rebuild a projection, under its own
	// Nats-Msg-Id (ReplayMsgID). Unlike the other two it delivers nothing
	// the relay owes: verify, the resume logic and the identity checks
	// leave it out.
	ReplayCopy = "replay"
)
