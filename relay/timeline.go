package relay

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/contract"
)

// forkPoint returns where timeline to's history (the content of its
// history file, TIMELINE_HISTORY) left timeline from: WAL before it is the
// same on both, WAL from it on may differ. A promoted standby's fork point
// is the end of the WAL it had received.
func forkPoint(history []byte, from, to uint32) (pglogrepl.LSN, error) {
	lsn, ok := parseForkPoint(history, from)
	if !ok {
		return 0, &contract.FatalError{
			Err:  fmt.Errorf("timeline %d does not descend from timeline %d, which the relay streamed on", to, from),
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
