package relay

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/progress"
	"github.com/outbox-relay/outbox-relay/sink"
)

// ReplayReport is what a replay did.
type ReplayReport struct {
	RunID string `json:"run_id"`
	// Stream and Subjects are where the copies went.
	Stream   string `json:"stream"`
	Subjects string `json:"subjects"`
	// Rows are the rows in range; Resumed of them were stored by an
	// earlier run of the same id and not published again; Skipped could
	// not be published as they are (they are dead letters of the relay).
	Rows, Published, Resumed, Skipped int
}

// ReplayDeps are the connections a replay uses: the relay's stream, on
// its NATS connection, and its Postgres pool and record.
type ReplayDeps struct {
	Pool   *pgxpool.Pool
	NC     *nats.Conn
	Stream *jetstream.Stream
	Store  *checkpoint.Store
}

// CountReplay returns how many rows a replay with o would republish.
func CountReplay(ctx context.Context, pool *pgxpool.Pool, cfg Config, o ReplayOptions) (int, error) {
	src, err := replaySource(ctx, pool, cfg)
	if err != nil {
		return 0, err
	}
	where, args := o.where()
	_, n, err := src.Oldest(ctx, pool, where, args)
	return n, err
}

// replaySource reads the tables' rows; a replay picks them by created_at.
func replaySource(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*RowSource, error) {
	src, err := NewRowSource(ctx, pool, cfg.Table, cfg.MoreTables...)
	if err != nil {
		return nil, err
	}
	if without := src.Without(contract.ColumnCreatedAt); len(without) > 0 {
		return nil, fmt.Errorf("replay picks rows by created_at, and %s has no created_at column", contract.JoinTables(without))
	}
	return src, nil
}

// Replay republishes the committed rows o selects, in commit order (as
// RowSource.Each reads them), as copies: marked Outbox-Replay: replay,
// each under contract.ReplayMsgID(o.RunID, its message id), to where o
// says (replayTarget). Each copy's Outbox-Txn-Index is its row's place in
// the run. A rerun of the same run id (same options) finds the last copy
// the run stored (the publisher stores them in the order offered) and
// goes on after it; JetStream drops, within the target's duplicate window,
// a copy stored twice all the same.
func Replay(ctx context.Context, d ReplayDeps, cfg Config, o ReplayOptions, log zerolog.Logger) (ReplayReport, error) {
	rep := ReplayReport{RunID: o.RunID}
	target, err := replayTarget(ctx, d, cfg, o)
	if err != nil {
		return rep, err
	}
	rep.Stream, rep.Subjects = target.Name(), target.Filter()
	src, err := replaySource(ctx, d.Pool, cfg)
	if err != nil {
		return rep, err
	}
	where, args := o.where()
	if _, rep.Rows, err = src.Oldest(ctx, d.Pool, where, args); err != nil {
		return rep, err
	}
	after, err := resumeAfter(ctx, target, o.RunID)
	if err != nil {
		return rep, err
	}
	log = log.With().Str("run_id", o.RunID).Str("stream", rep.Stream).Str("subjects", rep.Subjects).Logger()
	log.Info().Int("rows", rep.Rows).Int("stored_already", after.index+1).Msg("replaying the rows in range")
	tcfg := cfg
	tcfg.Subject, tcfg.DeadLetterSubject = target.template, target.deadLetter
	pub, err := newOneShot(ctx, target.Stream, tcfg, d.Store, contract.ReplayCopy, nil, log)
	if err != nil {
		return rep, err
	}
	show := o.Show
	if show == nil {
		show = progress.Log(log)
	}
	prog := progress.NewTo("replaying", rep.Rows-after.index-1, show)
	stop := prog.Every(ctx, o.Progress)
	_, err = src.Each(ctx, d.Pool, where, args, func(ev *decode.Event) error {
		switch skip, err := after.skips(ev); {
		case err != nil:
			return err
		case skip:
			rep.Resumed++
			return nil
		}
		ev.ID, ev.QualifyID = contract.ReplayMsgID(o.RunID, ev.MsgID()), false
		if reason := pub.Rejects(ev); reason != "" {
			log.Warn().Str("event_id", ev.ID).Str("reason", reason).Msg("row cannot be published as it is (a dead letter of the relay): not replayed")
			rep.Skipped++
			prog.Add()
			return nil
		}
		rep.Published++
		prog.Add()
		return pub.Publish(ctx, ev)
	})
	if ferr := pub.Finish(ctx); err == nil {
		err = ferr
	}
	stop()
	if err != nil {
		return rep, fmt.Errorf("replay run %s: %w (rerun with --run-id %s to go on where it stopped)", o.RunID, err, o.RunID)
	}
	log.Info().Int("published", rep.Published).Int("resumed", rep.Resumed).Int("skipped", rep.Skipped).Msg("replayed the rows in range")
	return rep, nil
}

// resumePoint is where an earlier run of the same id stopped: the place
// (index) and message id of the last copy it stored; index -1 when none.
type resumePoint struct {
	index int
	msgID string
}

// errRowsChanged ends a resumed run whose rows are not those it began
// with.
var errRowsChanged = errors.New("the rows in range are not those the run began with")

func resumeAfter(ctx context.Context, target *replayStream, runID string) (resumePoint, error) {
	last, err := target.LastCopy(ctx, runID)
	if err != nil || last == nil {
		return resumePoint{index: -1}, err
	}
	_, msgID, _ := contract.SplitReplayMsgID(last.ID)
	return resumePoint{index: int(last.Position.Index), msgID: msgID}, nil
}

// skips reports whether the run stored ev's copy already; the row at the
// last copy's place must be the same one.
func (p resumePoint) skips(ev *decode.Event) (bool, error) {
	i := int(ev.Position.Index)
	switch {
	case i > p.index:
		return false, nil
	case i == p.index && ev.MsgID() != p.msgID:
		return false, fmt.Errorf("%w: the run's last copy, number %d, is of %s, and that row is now %s (rows deleted, or different options): start a new run, without --run-id",
			errRowsChanged, i, p.msgID, ev.MsgID())
	}
	return true, nil
}

// replayStream is where copies go: a stream, the subject template they
// are rendered with and their dead-letter subject.
type replayStream struct {
	*jetstream.Stream
	template   sink.Template
	deadLetter string
}

// Filter is the copies' subjects.
func (t *replayStream) Filter() string { return t.template.Filter() }

// replayTarget opens the stream the copies go to: with IntoRelayStream,
// the relay's own, on its subjects; otherwise the stream storing
// P.<subject> (P the SubjectPrefix, or the prefix of ToStream's subjects
// P.>), which must be ToStream when it is named, and must not be the
// relay's stream, whose consumers would take the copies for new events.
func replayTarget(ctx context.Context, d ReplayDeps, cfg Config, o ReplayOptions) (*replayStream, error) {
	t := &replayStream{Stream: d.Stream, template: cfg.Subject, deadLetter: cfg.DeadLetterSubject}
	if o.IntoRelayStream {
		return t, nil
	}
	prefix := o.SubjectPrefix
	if prefix == "" {
		subjects, err := streamSubjects(ctx, d.NC, o.ToStream)
		if err != nil {
			return nil, err
		}
		if prefix, err = prefixOf(o.ToStream, subjects); err != nil {
			return nil, err
		}
	}
	tmpl, err := sink.ParseTemplate(prefix+"."+cfg.Subject.String(), sink.WithDots(cfg.Subject.Dots()))
	if err != nil {
		return nil, fmt.Errorf("--subject-prefix %q: %w", prefix, err)
	}
	t.template, t.deadLetter = tmpl, prefix+"."+cfg.DeadLetterSubject
	name, err := jetstream.StreamStoring(ctx, d.NC, tmpl.Filter())
	switch {
	case err != nil:
		return nil, err
	case name == "":
		return nil, fmt.Errorf("no stream stores %s: create one (nats stream add REPLAY --subjects '%s.>'), or name one with --to-stream", tmpl.Filter(), prefix)
	case o.ToStream != "" && name != o.ToStream:
		return nil, fmt.Errorf("the copies' subjects %s are stored by stream %q, not %q: choose another --subject-prefix", tmpl.Filter(), name, o.ToStream)
	case name == d.Stream.Name():
		return nil, fmt.Errorf("the copies' subjects %s are stored by the relay's own stream %q, whose consumers would take them for events: choose a prefix outside its subjects, or pass --into-relay-stream to publish there on purpose",
			tmpl.Filter(), name)
	}
	if t.Stream, err = jetstream.OpenExisting(ctx, d.NC, jetstream.StreamSpec{Name: name, Template: tmpl, DeadLetterSubject: t.deadLetter}); err != nil {
		return nil, err
	}
	return t, nil
}

// streamSubjects returns the subjects of the stream named.
func streamSubjects(ctx context.Context, nc *nats.Conn, name string) ([]string, error) {
	s, err := jetstream.OpenExisting(ctx, nc, jetstream.StreamSpec{Name: name})
	if err != nil {
		return nil, fmt.Errorf("--to-stream: %w (create it, with subjects P.>, or name another)", err)
	}
	return s.Subjects(), nil
}
