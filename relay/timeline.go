package relay

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/replication"
)

// forkPoint returns where timeline to's history left timeline from
// (TIMELINE_HISTORY): WAL before it is the same on both, WAL from it on
// may differ. A promoted standby's fork point is the end of the WAL it had
// received.
func forkPoint(ctx context.Context, repl *pgconn.Config, from, to uint32) (pglogrepl.LSN, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgconn.ConnectConfig(ctx, repl)
	if err != nil {
		return 0, fmt.Errorf("open replication connection to %s: %w", replication.Describe(repl), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	hist, err := pglogrepl.TimelineHistory(ctx, conn, int32(to))
	if err != nil {
		return 0, fmt.Errorf("read the history of timeline %d (TIMELINE_HISTORY): %w", to, err)
	}
	lsn, ok := parseForkPoint(hist.Content, from)
	if !ok {
		return 0, &replication.FatalError{
			Err:  fmt.Errorf("timeline %d does not descend from timeline %d, which the relay streamed on (history file %s)", to, from, hist.FileName),
			Hint: "the server's history is not the one the relay followed: check which cluster answers at --pg-url",
			Gap:  true,
		}
	}
	return lsn, nil
}

// parseForkPoint reads, in a timeline history file ("tli<TAB>switchpoint
// <TAB>reason" lines), the point where timeline from ended.
func parseForkPoint(content []byte, from uint32) (pglogrepl.LSN, bool) {
	sc := bufio.NewScanner(bytes.NewReader(content))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		tli, err := strconv.ParseUint(fields[0], 10, 32)
		if err != nil || uint32(tli) != from {
			continue
		}
		lsn, err := pglogrepl.ParseLSN(fields[1])
		return lsn, err == nil
	}
	return 0, false
}
