package workerstore

import (
	"bytes"
	"context"
	"crypto/md5"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/relayer-go/relayer/internal/storesql"
	"github.com/relayer-go/relayer/store"
)

// Lane cursors. Delivered rows leave dead entries in the lane index until
// vacuum removes them, and vacuum cannot while any snapshot older than the
// deletes is open (a long report, a forgotten transaction). A read that
// starts at the lane's first entry walks all of them, so that every batch
// costs more the longer the snapshot is held. A worker that keeps holding a
// lane therefore reads it from a cursor instead: the rows after the last row
// it delivered that its previous read's snapshot saw, plus every row that
// snapshot did not see, found through the xact index (rows carry the id of
// the transaction that made them eligible; see the fourth migration).
//
// What makes this exact is the cursor's invariant: every row of the lane
// that the cursor's snapshot saw, with an id at or below the cursor's, is
// gone from reads: deleted, or hidden behind its key's recorded failure.
// Rows hidden by a retry come back when the retry time passes; the cursor
// keeps the lane's earliest one, and the read starts from the lane's first
// entry once it has passed. Rows hidden behind a parked key come back when
// the key is released, by whatever program: the cursor keeps a digest of the
// lane's held rows as its snapshot saw them, and a read that finds a
// different digest starts from the lane's first entry. (This release's own
// redrive also stamps a released key's rows with its transaction's id; the
// cursor no longer depends on it, so that an older release's redrive, or an
// operator's UPDATE or DELETE, cannot make a read miss them.) A read
// also starts from the first entry whenever the lease changed hands since
// the cursor was made, since another holder may have changed the lane, and
// whenever the database server restarted or recovered from a crash, which may
// have lost the last of the workers' asynchronous commits.

// LaneCursor is where an ordered worker's next read of one lane starts: what
// its previous read of the lane, under the same lease, saw. The zero value
// but for Lane reads the lane from its start. Make one with [NewLaneCursor]
// and advance it with [LaneCursor.Advance] once the reading transaction has
// committed.
type LaneCursor struct {
	Lane  int
	after uuid.UUID // rows the snapshot saw, with ids up to after, are gone
	xmax  string    // the snapshot's xmax, "" for none
	xip   string    // its in-progress ids as an array literal
	// lowest is where the read walks the xact index from, and probes the
	// ids it probes: xmin and none, or xmax and xip (see narrowSnapshot).
	lowest, probes string
	retry          time.Time // the lane's earliest retry time to come; zero: none
	since          time.Time // acquired_at of the lease the cursor was made under
	// server is the life of the database server the cursor was made in: a
	// crash may lose the last commits of the workers' asynchronous commits,
	// bringing back rows the cursor passed.
	server string
	// held is the digest of the lane's held rows the snapshot saw.
	held string
}

// FromStart reports whether c reads its lane from the lane's first entry:
// it was made by [NewLaneCursor], or never advanced.
func (c LaneCursor) FromStart() bool { return c.xmax == "" }

// NewLaneCursor returns a cursor that reads lane from its start.
func NewLaneCursor(lane int) LaneCursor { return LaneCursor{Lane: lane} }

// LaneRead is what a cursor read learned about one lane besides its rows.
type LaneRead struct {
	Lane int
	// Rows is how many rows the read returned for the lane, the lane's
	// rows in the result being contiguous and in id order.
	Rows   int
	full   bool // Rows reached the read's limit
	xmax   string
	xip    string
	lowest string
	probes string
	retry  time.Time
	since  time.Time
	server string
	held   string
}

// Advance returns the cursor for the lane's next read, by the same lease
// holder, once the transaction of read r has committed. rows are the
// lane's rows r returned, in id order; gone is how many of them, from the
// first, left reads for good in that transaction: sent and deleted, moved
// to the dead letters, or hidden because their key failed (a row whose key
// only waits, untouched, is not gone); retryAt is the earliest retry time
// the transaction recorded for the lane, zero for none; held are the keys
// whose rows that transaction parked or made wait for a retry time (so
// that the cursor's digest of the held keys is the one the transaction
// left). A read that returned no rows leaves the cursor as it was.
func (c LaneCursor) Advance(r LaneRead, rows []store.Row, gone int, retryAt time.Time, held ...string) LaneCursor {
	if len(rows) == 0 || r.Lane != c.Lane {
		return c
	}
	next := LaneCursor{Lane: c.Lane, xmax: r.xmax, xip: r.xip, lowest: r.lowest, probes: r.probes, retry: r.retry,
		since: r.since, server: r.server, held: addHeldKeys(r.held, held)}
	if !retryAt.IsZero() && (next.retry.IsZero() || retryAt.Before(next.retry)) {
		next.retry = retryAt
	}
	switch {
	case gone < len(rows):
		next.after = IDBefore(rows[gone].ID)
	case r.full:
		next.after = rows[len(rows)-1].ID
	default:
		// The read returned every row it could see, and all are gone: any
		// id past the last serves, the previous cursor's among them.
		next.after = rows[len(rows)-1].ID
		if bytes.Compare(c.after[:], next.after[:]) > 0 {
			next.after = c.after
		}
	}
	return next
}

// addHeldKeys returns the digest of held keys (see heldDigest) with keys
// added to it, none of which it holds yet: a read leaves out the rows of
// keys held already, so a transaction can only hold keys that were not.
// A digest it cannot parse comes back empty, which reads from the start.
func addHeldKeys(digest string, keys []string) string {
	if len(keys) == 0 {
		return digest
	}
	count, sum, ok := strings.Cut(digest, ":")
	n, errN := strconv.ParseInt(count, 10, 64)
	total, errS := strconv.ParseInt(sum, 10, 64)
	if !ok || errN != nil || errS != nil {
		return ""
	}
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if seen[k] {
			continue
		}
		seen[k] = true
		n++
		total += int64(heldKeyHashOf(k))
	}
	return strconv.FormatInt(n, 10) + ":" + strconv.FormatInt(total, 10)
}

// heldKeyHashOf is heldKeyHash in Go: the first four bytes of key's MD5, as
// a signed big-endian integer. MD5 serves as a well-spread hash that both
// sides compute alike, not for security.
func heldKeyHashOf(key string) int32 {
	sum := md5.Sum([]byte(key))
	return int32(binary.BigEndian.Uint32(sum[:4]))
}

// IDBefore returns the id just below id in uuid order (id - 1, as a 128-bit
// big-endian number): a read after it begins at id.
func IDBefore(id uuid.UUID) uuid.UUID {
	for i := len(id) - 1; i >= 0; i-- {
		id[i]--
		if id[i] != 0xff {
			break
		}
	}
	return id
}

// ReadLanes appends to dst[:0], in one statement, the first limit rows of
// each lane of from, read from its cursor (see [LaneCursor]), lane after
// lane in ascending order, each lane's in id order: rows that are not
// parked and whose key has no parked row nor one waiting for its retry,
// whether due and unclaimed or not. The caller sends only the prefix before
// the first row it may not send yet, so that no row overtakes its head. A
// row whose stored headers do not decode is returned with [store.Row.Corrupt] set
// rather than failing the read: one bad row must not stop its lane's other
// keys. It returns, for each lane that had rows, what the read learned, to
// advance its cursor with. The caller must hold the lanes' leases in the
// same transaction.
func (s *Store) ReadLanes(ctx context.Context, dst []store.Row, from []LaneCursor, limit int) ([]store.Row, []LaneRead, error) {
	if toRead, err := validLaneRead(from, limit); !toRead || err != nil {
		return dst[:0], nil, err
	}
	args := append(cursorArgs(from), limit)
	dst, reads, err := s.readLanes(ctx, s.laneHeadsFor(from), args, dst, limit)
	if errors.Is(err, errLaneReadUnordered) {
		dst, reads, err = s.readLanes(ctx, s.q.laneHeadsSorted, args, dst, limit)
	}
	if err != nil {
		return dst[:0], nil, storesql.Wrap(ctx, "read lanes", err)
	}
	return dst, reads, nil
}

// readLanes runs the lane read query with args and scans its rows.
func (s *Store) readLanes(ctx context.Context, query string, args []any, dst []store.Row, limit int) ([]store.Row, []LaneRead, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return dst, nil, err
	}
	defer rows.Close()
	dst, reads, err := s.scanLaneReads(rows, false, dst, limit)
	if err == nil {
		err = rows.Close()
	}
	return dst, reads, err
}

// laneHeadsFor returns the lane read for cursors from: the one without the
// probes of in-progress transactions unless a cursor has ids to probe.
func (s *Store) laneHeadsFor(from []LaneCursor) string {
	for _, c := range from {
		if c.probes != "" && c.probes != "{}" {
			return s.q.laneHeads
		}
	}
	return s.q.laneHeadsUnprobed
}

// validLaneRead checks a lane read's limit and reports whether from names any
// lane to read.
func validLaneRead(from []LaneCursor, limit int) (bool, error) {
	if limit <= 0 {
		return false, fmt.Errorf("%w: limit must be positive, got %d", store.ErrInvalidArgument, limit)
	}
	return len(from) > 0, nil
}

// laneRows is the result of a lane read: *sql.Rows, or pgx's rows where the
// read was pipelined (see pipelined).
type laneRows interface {
	storesql.Scanner
	Next() bool
	Err() error
}

// errLaneReadUnordered reports a lane read whose rows did not come lane
// after lane in ascending order, each lane's in id order: the read runs
// again, sorted (see laneHeadsRead).
var errLaneReadUnordered = errors.New("lane read out of order")

// inLaneOrder reports whether b may follow a in a lane read's rows.
func inLaneOrder(a, b *store.Row) bool {
	return a.Lane < b.Lane || a.Lane == b.Lane && bytes.Compare(a.ID[:], b.ID[:]) < 0
}

// scanLaneReads appends the rows of a lane read (laneHeads) to dst[:0] and
// returns them with what the read learned about each lane, or
// errLaneReadUnordered. lent is set for pgx's own rows (see
// storesql.Scratch.Lent).
func (s *Store) scanLaneReads(rows laneRows, lent bool, dst []store.Row, limit int) ([]store.Row, []LaneRead, error) {
	dst = dst[:0]
	var (
		reads     []LaneRead
		sc        = storesql.Scratch{FreshBytes: s.freshBytes && !lent, Lent: lent}
		snap      sql.RawBytes
		acquired  sql.NullTime
		nextRetry sql.NullTime
		life      sql.RawBytes
		held      sql.RawBytes
		err       error
		// pgx's own destinations when lent (see storesql.Scratch).
		lentAcquired, lentNextRetry pgtype.Timestamptz
		extra                       = []any{&snap, &acquired, &nextRetry, &life, &held}
	)
	if lent {
		extra = []any{(*pgtype.DriverBytes)(&snap), &lentAcquired, &lentNextRetry, (*pgtype.DriverBytes)(&life), (*pgtype.DriverBytes)(&held)}
	}
	for rows.Next() {
		dst = append(dst, store.Row{})
		r := &dst[len(dst)-1]
		if err := scanKeepingCorrupt(&sc, rows, r, extra...); err != nil {
			return dst, nil, err
		}
		if lent {
			var errSince, errRetry error
			acquired, errSince = storesql.LentTime("since", lentAcquired)
			nextRetry, errRetry = storesql.LentTime("next_retry", lentNextRetry)
			if err := errors.Join(errSince, errRetry); err != nil {
				return dst, nil, err
			}
		}
		if n := len(dst); n > 1 && !inLaneOrder(&dst[n-2], r) {
			return dst, nil, errLaneReadUnordered
		}
		if n := len(reads); n > 0 && reads[n-1].Lane == r.Lane {
			reads[n-1].Rows++
			continue
		}
		read := LaneRead{Lane: r.Lane, Rows: 1}
		if read.xmax, read.xip, read.lowest, read.probes, err = parseSnapshot(snap); err != nil {
			return dst, nil, err
		}
		if acquired.Valid {
			read.since = acquired.Time.UTC()
		}
		if nextRetry.Valid {
			read.retry = nextRetry.Time.UTC()
		}
		read.server = string(life)
		read.held = string(held)
		reads = append(reads, read)
	}
	if err := rows.Err(); err != nil {
		// An interrupted read must never look like a short backlog.
		return dst, nil, err
	}
	for i := range reads {
		reads[i].full = reads[i].Rows >= limit
	}
	return dst, reads, nil
}

// cursorArgs returns the parameters $1 to $10 of a read from the cursors
// from (see laneCursorArgs).
func cursorArgs(from []LaneCursor) []any {
	var lanes, after, xmax, xip, retry, since, server, lowest, probes, held storesql.ArrayLiteral
	for _, c := range from {
		lanes.Int(c.Lane, false)
		after.UUID(c.after)
		xmax.Text(c.xmax, c.xmax == "")
		xip.Text(c.xip, c.xip == "")
		retry.Time(c.retry, c.retry.IsZero())
		since.Time(c.since, c.since.IsZero())
		server.Text(c.server, c.server == "")
		lowest.Text(c.lowest, c.lowest == "")
		probes.Text(c.probes, c.probes == "")
		held.Text(c.held, c.held == "")
	}
	return []any{lanes.String(), after.String(), xmax.String(), xip.String(),
		retry.String(), since.String(), server.String(), lowest.String(), probes.String(), held.String()}
}

// narrowSnapshot is the most transaction ids between a snapshot's xmin and
// xmax for which a cursor read walks the xact index from xmin rather than
// probing each in-progress id: about the transactions a busy outbox runs in
// a few seconds.
const narrowSnapshot = 10000

// parseSnapshot splits a pg_snapshot's text form, xmin:xmax:xip,... into
// its xmax and its in-progress ids as an array literal, and returns where a
// read from it walks the xact index from and the ids it probes (see
// narrowSnapshot).
func parseSnapshot(b []byte) (xmax, xip, lowest, probes string, err error) {
	parts := bytes.Split(b, []byte{':'})
	if len(parts) != 3 {
		return "", "", "", "", fmt.Errorf("unexpected snapshot %q", b)
	}
	xmin, errMin := strconv.ParseUint(string(parts[0]), 10, 64)
	top, errMax := strconv.ParseUint(string(parts[1]), 10, 64)
	if errMin != nil || errMax != nil || xmin > top {
		return "", "", "", "", fmt.Errorf("unexpected snapshot %q", b)
	}
	for _, c := range parts[2] {
		if (c < '0' || c > '9') && c != ',' {
			return "", "", "", "", fmt.Errorf("unexpected snapshot %q", b)
		}
	}
	xmax, xip = string(parts[1]), "{"+string(parts[2])+"}"
	if top-xmin <= narrowSnapshot {
		return xmax, xip, string(parts[0]), "{}", nil
	}
	return xmax, xip, xmax, xip, nil
}
