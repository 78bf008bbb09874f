package jetstream

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// FastIngest says whether a Publisher may publish with fast-ingest
// batches (see fastingest.go).
type FastIngest string

const (
	// FastIngestOff publishes every event with its own PubAck (the zero
	// value).
	FastIngestOff FastIngest = "off"
	// FastIngestAuto publishes in fast-ingest batches when the connected
	// server (2.14+) and the stream (allow_batched) allow it.
	FastIngestAuto FastIngest = "auto"
)

// Validate refuses a value other than auto and off.
func (f FastIngest) Validate() error {
	switch f {
	case "", FastIngestOff, FastIngestAuto:
		return nil
	}
	return fmt.Errorf("fast ingest %q: use auto or off", string(f))
}

// fastIngestMinor is the first nats-server 2.x release with fast ingest.
const fastIngestMinor = 14

// fastIngestRefusal returns why the Publisher cannot use fast ingest with
// the server at version and the stream described by info; "" when it can.
func fastIngestRefusal(mode FastIngest, version string, info *natsjs.StreamInfo) string {
	switch {
	case mode != FastIngestAuto:
		return "fast ingest is turned off (--fast-ingest off)"
	case info == nil:
		return "no stream to check for batched publishing"
	case !serverAtLeast(version, 2, fastIngestMinor):
		return fmt.Sprintf("nats-server %s does not offer fast-ingest batches (2.14+ does): upgrade it, or set --fast-ingest off to silence this", version)
	case !info.Config.AllowBatchPublish:
		return fmt.Sprintf("stream %s does not allow batched publishing: set its allow_batched to true (nats stream edit, or the relay creates it so with --stream-allow-batched), or set --fast-ingest off to silence this", info.Config.Name)
	}
	return ""
}

// serverAtLeast reports whether version ("2.15.2") is major.minor or
// later. (nats.go's own check, Conn.serverMinVersion, is unexported.)
func serverAtLeast(version string, major, minor int) bool {
	maj, rest, _ := strings.Cut(version, ".")
	mnr, _, _ := strings.Cut(rest, ".")
	a, err1 := strconv.Atoi(strings.TrimPrefix(maj, "v"))
	b, err2 := strconv.Atoi(mnr)
	if err1 != nil || err2 != nil {
		return false
	}
	return a > major || (a == major && b >= minor)
}

// setupFastIngest turns fast ingest on when Config.FastIngest, the server
// and the stream allow it, and says at start which publishing the
// Publisher uses and why.
func (p *Publisher) setupFastIngest() error {
	if p.cfg.Atomic {
		// Atomic batches carry whole transactions; a fast-ingest batch
		// cannot hold one (a message belongs to one batch or the other).
		if p.cfg.FastIngest == FastIngestAuto {
			p.log.Info().Str("publishing", "atomic").Msg("publishing whole transactions as atomic batches (--atomic-transactions): fast ingest is not used")
		}
		return nil
	}
	var info *natsjs.StreamInfo
	if p.cfg.Stream != nil {
		info = p.cfg.Stream.CachedInfo()
	}
	if why := fastIngestRefusal(p.cfg.FastIngest, p.nc.ConnectedServerVersion(), info); why != "" {
		if p.cfg.FastIngest != "" { // chosen (the relay's flag): say so
			p.log.Info().Str("publishing", "async").Str("reason", why).Msg("publishing each event with its own PubAck")
		}
		return nil
	}
	fi := &fastBatch{
		flow:   max(1, min(DefaultFastFlow, p.cfg.Window/4)),
		max:    min(fastBatchMax, len(p.ring)),
		inbox:  p.nc.NewInbox(),
		linger: cmp.Or(p.cfg.FastLinger, DefaultFastLinger),
		tick:   time.NewTicker(time.Hour),
		ready:  make(chan struct{}, 1),
	}
	fi.tick.Stop()
	sub, err := p.nc.Subscribe(fi.inbox+".>", p.onFastReply)
	if err != nil {
		return fmt.Errorf("subscribe to fast-ingest replies: %w", err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return fmt.Errorf("set fast-ingest reply subscription limits: %w", err)
	}
	fi.sub = sub
	p.fi = fi
	p.log.Info().Str("publishing", "fast-ingest").Int("flow", fi.flow).Int("batch", fi.max).
		Str("server_version", p.nc.ConnectedServerVersion()).
		Msg("publishing in fast-ingest batches: the server confirms every few messages (flow acks); duplicates within the window are dropped without being counted")
	return nil
}
