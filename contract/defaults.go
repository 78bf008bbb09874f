package contract

// The names the relay, its tools and the libraries use unless told
// otherwise: each written here once, so that the CLI, dev and the
// libraries never disagree. The relay's flags take their defaults from
// these; the packages' own settings stay required (the slot's name, for
// example, is also the key of the relay's record of it).

// DefaultTable is the outbox table unless told otherwise: the seed
// article's public.outbox_events. Do not modify it.
var DefaultTable = Table{Schema: "public", Name: "outbox_events"}

const (
	// DefaultSlot is the replication slot the relay uses unless told
	// otherwise.
	DefaultSlot = "outbox_relay"
	// DefaultPublication is the publication the relay uses unless told
	// otherwise.
	DefaultPublication = "outbox_pub"
	// DefaultStream is the JetStream stream the relay publishes to unless
	// told otherwise.
	DefaultStream = "OUTBOX"
	// DefaultSubject is the subject template the relay uses unless told
	// otherwise.
	DefaultSubject = "outbox.{aggregate_type}.{event_type}"
	// DefaultDeadLetterSubject is the subject of dead letters unless told
	// otherwise.
	DefaultDeadLetterSubject = "outbox_dead_letter"
	// DefaultMessagePrefix is the prefix of table-less events (logical
	// decoding messages) unless told otherwise.
	DefaultMessagePrefix = "outbox"
	// DefaultMetricsAddr is where the relay serves /metrics, /healthz and
	// /readyz unless told otherwise, and where healthcheck asks.
	DefaultMetricsAddr = "127.0.0.1:9464"
)
