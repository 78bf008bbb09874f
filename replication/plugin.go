package replication

import (
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/decode"
)

// messagesMinMajor is the first Postgres major whose pgoutput sends logical
// decoding messages (the messages option).
const messagesMinMajor = 14

// pluginArgs returns pgoutput's options for a session on conn: protocol
// version 1 and the publication, and messages 'true' when table-less
// events are configured (Config.MessagePrefix) and the server has the
// option. Postgres 13 refuses unknown options, so there the option is
// left out and the relay says that table-less events are not relayed.
func (s *Stream) pluginArgs(conn *pgconn.PgConn) []string {
	args := []string{
		"proto_version '1'",
		"publication_names '" + s.cfg.Publication + "'",
	}
	if s.cfg.MessagePrefix == "" {
		return args
	}
	version := conn.ParameterStatus("server_version")
	if major := serverMajor(version); major < messagesMinMajor {
		s.log.Warn().Str("server_version", version).Str("message_prefix", s.cfg.MessagePrefix).
			Msg("table-less events (pg_logical_emit_message, outbox.Emit) need Postgres 14 or later: this server does not send them, so they are not relayed; write events to the outbox table, or run with --message-prefix '' to silence this")
		return args
	}
	return append(args, "messages 'true'")
}

// newDecoder returns the decoder for one session.
func (s *Stream) newDecoder() *decode.Decoder {
	var opts []decode.Option
	if len(s.cfg.MoreTables) > 0 {
		opts = append(opts, decode.WithTables(s.cfg.MoreTables...))
	}
	if s.cfg.MessagePrefix != "" {
		opts = append(opts, decode.WithMessagePrefix(s.cfg.MessagePrefix))
	}
	return decode.NewDecoder(s.cfg.Table, opts...)
}

// serverMajor reads the major version from server_version ("15.4 (Debian
// 15.4-1)", "14beta1", "9.6.24"); 0 when it cannot. Since version 10 the
// major is the first number.
func serverMajor(version string) int {
	end := 0
	for end < len(version) && version[end] >= '0' && version[end] <= '9' {
		end++
	}
	major, err := strconv.Atoi(version[:end])
	if err != nil {
		return 0
	}
	return major
}
