package dispatch

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// Stats are a dispatcher's counters since it was made.
type Stats struct {
	// Sent counts messages the broker accepted.
	Sent uint64
	// Deleted counts rows deleted after their send.
	Deleted uint64
	// Failed counts messages whose send failed and whose failure was recorded.
	Failed uint64
	// Expired counts groups not sent because their claim had expired by the time
	// the database answered, or whose send was abandoned at the claim's expiry;
	// their rows stay for another try.
	Expired uint64
	// SkippedGroups counts groups skipped without claiming (unregistered
	// transport, capability lookup failure, nonpositive MaxBatchSize).
	SkippedGroups uint64
	// CompletionFailures counts takes whose commit (or the write-back of their
	// unsent rows) failed after a successful send: they roll back, and their
	// rows are sent again.
	CompletionFailures uint64
	// LeftForRecovery counts committed rows the dispatcher was told about but did
	// not take (full queue, stopped) or dropped at a hard stop.
	LeftForRecovery uint64
	// Scans counts recovery take statements and ordered lane probes: the
	// worker's runs over the outbox.
	Scans uint64
	// CorruptRows counts rows that could not be sent because their stored
	// headers do not decode, or, ordered, because they have no key (only
	// another program writes such rows): recovery moves unordered ones to
	// the dead letters, ordered workers park ordered ones with their key,
	// and move keyless ones to the dead letters.
	CorruptRows uint64
	// DeadLettered counts rows moved to the dead letters: unordered ones
	// failed for good (relayer.ErrPermanent), out of attempts, or corrupt;
	// ordered ones over the outbox's limits or without a key.
	DeadLettered uint64
	// Parked counts ordered rows parked with their key: failed for good or
	// out of attempts.
	Parked uint64
	// Probes counts single-row sends recovery made to test whether a paused
	// destination is back.
	Probes uint64
}

type counters struct {
	sent, deleted, failed, expired, skipped, completionFailures, left, scans, corrupt atomic.Uint64
	// buried counts rows a take committed to the dead letters.
	buried, parked, probes atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Sent: c.sent.Load(), Deleted: c.deleted.Load(), Failed: c.failed.Load(),
		Expired: c.expired.Load(), SkippedGroups: c.skipped.Load(),
		CompletionFailures: c.completionFailures.Load(), LeftForRecovery: c.left.Load(), Scans: c.scans.Load(),
		CorruptRows: c.corrupt.Load(), DeadLettered: c.buried.Load(), Parked: c.parked.Load(),
		Probes: c.probes.Load(),
	}
}

// group is the notified rows of one (transport, destination).
type group struct {
	endpoint
	msgs []*relayer.Message
}

// groupRows groups notified rows by endpoint in order of first appearance.
func groupRows(rows []relayer.Message) []group {
	var groups []group
	for e, idx := range groupByEndpoint(rows, func(m *relayer.Message) endpoint { return endpoint{m.Transport, m.Destination} }) {
		g := group{endpoint: e, msgs: make([]*relayer.Message, len(idx))}
		for i, k := range idx {
			g.msgs[i] = &rows[k]
		}
		groups = append(groups, g)
	}
	return groups
}

// groupByEndpoint yields each endpoint of items in order of first appearance,
// with the indexes of its items in their order. It is how direct dispatch
// and recovery split what they send by (transport, destination).
func groupByEndpoint[T any](items []T, of func(*T) endpoint) iter.Seq2[endpoint, []int] {
	return func(yield func(endpoint, []int) bool) {
		var order []endpoint
		index := make(map[endpoint][]int)
		for i := range items {
			e := of(&items[i])
			if _, ok := index[e]; !ok {
				order = append(order, e)
			}
			index[e] = append(index[e], i)
		}
		for _, e := range order {
			if !yield(e, index[e]) {
				return
			}
		}
	}
}

// sender delivers groups of unordered rows: the claim, send, and fenced
// outcome protocol shared by direct dispatch and recovery. Not safe for
// concurrent use.
type sender struct {
	transports map[string]relayer.Transport
	caps       *capCache
	batchSize  int
	claimFor   time.Duration
	logger     *slog.Logger
	stats      *counters
	ids        []uuid.UUID
	taken      []workerstore.Taken
	prior      []workerstore.Taken
	// tainted is set when a transport call was abandoned and may still read
	// the messages it was given: their owner must not reuse that memory.
	tainted bool
	// chain, when set, ends each take with COMMIT AND CHAIN instead of COMMIT,
	// so that the next take's transaction is already open when the next rows
	// arrive: one round trip fewer per chunk, and less latency. The open
	// transaction has run no statement yet, so it holds no snapshot and no
	// transaction id, and keeps nothing from vacuum. Its owner ends it with
	// endChain when it has nothing to do.
	chain bool
	// open is the transaction the last COMMIT AND CHAIN began, or nil.
	open *take
	// seen is the direct worker's scratch map for lastOfEachID.
	seen map[uuid.UUID]int
	// aside is the destinations set aside as slow, shared by the workers of
	// a dispatcher (and a direct dispatcher's recovery).
	aside *setAside
	// clock is the database's clock, for eligibility and retry times;
	// deadlines stay local.
	clock *dbClock
	// retries is each message type's retry policy.
	retries *retries
	// session, when set, is the context transactions begin under: one that
	// outlives each take, for the chained transactions of a direct worker
	// (see detach). Otherwise each take's transaction begins under the
	// take's own context.
	session context.Context
}

// chainIdle is how long a direct worker keeps a chained transaction open while
// no rows arrive; then it ends it, so that idle workers show as idle.
const chainIdle = time.Second

// resolve returns the transport of an endpoint and the largest chunk to send
// to it. When the transport is not registered or its capabilities cannot be
// had, it logs, counts a skipped group and returns false.
func (s *sender) resolve(ctx context.Context, e endpoint, rows int) (relayer.Transport, int, bool) {
	tr, ok := s.transports[e.transport]
	if !ok {
		s.stats.skipped.Add(1)
		s.logger.Error("dispatch: transport not registered; group skipped for recovery",
			slog.String("transport", e.transport), slog.String("destination", e.destination), slog.Int("rows", rows))
		return nil, 0, false
	}
	caps, err := s.caps.get(ctx, e, tr)
	if err != nil && errors.Is(err, relayer.ErrUnavailable) && s.aside != nil {
		// The transport cannot say what the destination is (no stream
		// captures the subject): paused as if a send had found it so,
		// which logs it once.
		s.stats.skipped.Add(1)
		s.aside.record(e, unavailable, err)
		s.logger.Debug("dispatch: capability lookup found the destination unavailable; group skipped for recovery",
			slog.String("transport", e.transport), slog.String("destination", e.destination),
			slog.Int("rows", rows), slog.String("error", err.Error()))
		return nil, 0, false
	}
	if err != nil {
		s.stats.skipped.Add(1)
		s.logger.Error("dispatch: capability lookup failed; group skipped for recovery",
			slog.String("transport", e.transport), slog.String("destination", e.destination),
			slog.Int("rows", rows), slog.String("error", err.Error()))
		return nil, 0, false
	}
	return tr, min(s.batchSize, caps.MaxBatchSize), true
}

// deliver claims and sends one group in chunks bounded by the batch size and
// the endpoint's MaxBatchSize. It returns an error only for a failed database
// statement, after which the caller drops its connection; transport failures
// are recorded on the rows and logged.
func (s *sender) deliver(ctx context.Context, conn *workerConn, g group) error {
	tr, size, ok := s.resolve(ctx, g.endpoint, len(g.msgs))
	if !ok {
		return nil
	}
	for start := 0; start < len(g.msgs); start += size {
		if start > 0 && s.aside.skipped(g.endpoint) {
			// Set aside since the first chunk (or that chunk was its
			// probe): the rest stays in the table for recovery.
			s.stats.left.Add(uint64(len(g.msgs) - start))
			return nil
		}
		if err := s.deliverChunk(ctx, conn, tr, g.endpoint, g.msgs[start:min(start+size, len(g.msgs))]); err != nil {
			return err
		}
	}
	return nil
}

// deliverChunk takes notified rows by id and sends the ones it took. The take
// returns ids and recorded failures only: the notification already holds each row's
// stored bytes, so they are not read back.
func (s *sender) deliverChunk(ctx context.Context, conn *workerConn, tr relayer.Transport, e endpoint, msgs []*relayer.Message) error {
	stop := ctx
	ctx, done := detach(stop, time.Now().Add(s.claimFor+idleTxMargin))
	defer done()
	t, err := s.start(ctx, conn, time.Now())
	if err != nil {
		return err
	}
	t.stop = stop
	s.ids = s.ids[:0]
	for _, m := range msgs {
		s.ids = append(s.ids, m.ID)
	}
	s.taken, err = t.st.TakeIDs(ctx, s.taken, s.ids, s.clock.now())
	if err != nil {
		t.tx.Rollback()
		return err
	}
	if len(s.taken) == 0 {
		// Nothing taken: sent by someone else, not yet due, or gone with a
		// savepoint. The transaction changed nothing and serves the next take.
		if s.chain {
			s.open = t
		} else {
			t.tx.Rollback()
		}
		return nil
	}
	// Line the taken rows up with msgs, dropping the messages not taken.
	s.prior = s.prior[:0]
	keep := msgs[:0:0]
	for _, m := range msgs {
		if i, found := slices.BinarySearchFunc(s.taken, m.ID, func(a workerstore.Taken, id uuid.UUID) int { return bytes.Compare(a.ID[:], id[:]) }); found {
			keep = append(keep, m)
			s.prior = append(s.prior, s.taken[i])
		}
	}
	s.tainted = s.sendTaken(ctx, t, e, tr, keep, s.prior) || s.tainted
	return s.finish(ctx, t)
}

// take is one transaction of taken rows (see workerstore.Store.TakeIDs): its DELETEs hold
// the rows until it commits, which makes the sent rows' removal durable;
// rows not sent are written back first.
type take struct {
	tx *sql.Tx
	st *workerstore.Store
	// stop is the worker's context: once it is cancelled, no further send
	// starts, and the rows not sent are kept, while the sends under way and
	// the take's record run on to their end on a context detached from it.
	stop context.Context
	// until is the claim's expiry: no send starts after it, and a send still
	// running at it is abandoned.
	until   time.Time
	sent    int
	nfailed int
	restore []store.Row
	// dead is the rows leaving delivery, for the dead letters, with their
	// reasons.
	dead    []store.Row
	reasons []string
	// recorded is set when a row to write back spent an attempt, or a row
	// leaves delivery: the take then has something to record even if it sent
	// nothing.
	recorded bool
}

// merge adds the outcome of part, a take's group sent on its own, to t.
func (t *take) merge(part *take) {
	t.sent += part.sent
	t.nfailed += part.nfailed
	t.restore = append(t.restore, part.restore...)
	t.dead = append(t.dead, part.dead...)
	t.reasons = append(t.reasons, part.reasons...)
	t.recorded = t.recorded || part.recorded
}

// failed notes the failed send of m, which had failed prior.Attempts times
// before, as the retry policy judges it: written back to wait for its retry
// (or at once, unchanged, when its destination was unavailable), or moved to
// the dead letters.
func (t *take) failed(s *sender, m *relayer.Message, prior workerstore.Taken, err error) {
	v := s.retries.judge(m, prior.Attempts, err, s.clock.now())
	row := store.Row{Message: *m, Attempts: v.attempts, LastError: err.Error(), RetryAt: v.retryAt}
	if v.attempts == prior.Attempts {
		row.LastError = prior.LastError // an unavailable destination says nothing of the message
	}
	t.nfailed++
	if over := store.OverLimit(m); over != nil && v.reason == "" && !v.retryAt.IsZero() {
		// Its endpoint would not fit the index of failed rows: written
		// back to wait for its retry, it would fail the take; it leaves
		// delivery instead.
		v.reason = store.ReasonOverLimit
		row.LastError = fmt.Sprintf("%s (and %v: moved to the dead letters, since its failure cannot be recorded)", err, over)
	}
	if v.reason != "" {
		t.dead = append(t.dead, row)
		t.reasons = append(t.reasons, v.reason)
		t.recorded = true
		return
	}
	t.restore = append(t.restore, row)
	t.recorded = t.recorded || v.attempts > prior.Attempts
}

// begin opens a take on the pinned connection, with a claim that lasts the
// claim duration from now.
func (s *sender) begin(ctx context.Context, conn *workerConn, now time.Time) (*take, error) {
	txCtx := ctx
	if s.session != nil {
		txCtx = s.session
	}
	tx, st, err := conn.begin(txCtx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	return &take{tx: tx, st: st, until: now.Add(s.claimFor)}, nil
}

// start returns the chained transaction if one is open, or begins one.
func (s *sender) start(ctx context.Context, conn *workerConn, now time.Time) (*take, error) {
	if t := s.open; t != nil {
		s.open = nil
		t.until = now.Add(s.claimFor)
		return t, nil
	}
	return s.begin(ctx, conn, now)
}

// endChain rolls back the chained transaction, if one is open. It has run no
// statement, so nothing is lost.
func (s *sender) endChain() {
	if s.open != nil {
		s.open.tx.Rollback()
		s.open = nil
	}
}

// keep writes msgs back unchanged when the take commits.
func (t *take) keep(msgs []*relayer.Message, prior []workerstore.Taken) {
	for i, m := range msgs {
		t.restore = append(t.restore, store.Row{Message: *m, Attempts: prior[i].Attempts, LastError: prior[i].LastError})
	}
}

// sendTaken sends msgs, all taken by t, with prior[i] the failures already
// recorded on msgs[i], and notes the outcome on t. It reports
// abandoned when a transport call was abandoned and may still read the
// messages: the caller must not reuse their memory.
func (s *sender) sendTaken(ctx context.Context, t *take, e endpoint, tr relayer.Transport, msgs []*relayer.Message, prior []workerstore.Taken) (abandoned bool) {
	if !time.Now().Before(t.until) {
		s.stats.expired.Add(1)
		s.logger.Warn("dispatch: claim expired before sending; not sending",
			slog.String("transport", e.transport), slog.String("destination", e.destination), slog.Int("rows", len(msgs)))
		t.keep(msgs, prior)
		return false
	}
	if t.stop != nil && halted(t.stop) {
		t.keep(msgs, prior) // stopping: kept unsent, for the next worker
		return false
	}
	var timer *slowTimer
	if s.aside != nil {
		timer = s.aside.timeSend(e, t.until)
	}
	sendErr := send(ctx, tr, msgs, t.until)
	if timer != nil {
		// A straggler was ended for being slow: it timed out, as far as its
		// destination's state goes. Any other end of ctx is a stop.
		stopping := ctx.Err() != nil && !errors.Is(context.Cause(ctx), errStraggler)
		timer.end(outcomeOf(sendErr, stopping), sendErr)
	}
	var batchErr *relayer.BatchError
	switch {
	case sendErr == nil:
		t.sent += len(msgs)
		s.stats.sent.Add(uint64(len(msgs)))
		return false
	case errors.Is(sendErr, errAbandoned):
		// The broker may or may not have the messages: keep the rows with their
		// attempts untouched, as a claim that expired would.
		s.stats.expired.Add(1)
		s.logger.Warn("dispatch: send abandoned at the claim deadline or shutdown; rows kept and sent again later",
			slog.String("transport", e.transport), slog.String("destination", e.destination),
			slog.Int("rows", len(msgs)), slog.String("error", sendErr.Error()))
		t.keep(msgs, prior)
		return true
	case errors.As(sendErr, &batchErr) && len(batchErr.Errs) == len(msgs):
		failed, dead := 0, len(t.dead)
		var first error
		for i, m := range msgs {
			if err := batchErr.Errs[i]; err != nil {
				t.failed(s, m, prior[i], err)
				if failed == 0 {
					first = err
				}
				failed++
			}
		}
		t.sent += len(msgs) - failed
		s.stats.sent.Add(uint64(len(msgs) - failed))
		s.logFailure(e, failed, len(t.dead)-dead, first)
	default:
		dead := len(t.dead)
		for i, m := range msgs {
			t.failed(s, m, prior[i], sendErr)
		}
		s.logFailure(e, len(msgs), len(t.dead)-dead, sendErr)
	}
	return false
}

// logFailure logs a failed send of rows to e, dead of which left delivery,
// firstErr the first row's error. A destination found unavailable is logged
// by its pause, once (see setAside.settle), and here only at debug level:
// one warning per failed probe would repeat it every few seconds.
func (s *sender) logFailure(e endpoint, rows, dead int, firstErr error) {
	level := slog.LevelWarn
	if dead == 0 && errors.Is(firstErr, relayer.ErrUnavailable) {
		level = slog.LevelDebug
	}
	s.logger.Log(context.Background(), level, "dispatch: send failed; rows wait for their retry, or leave delivery once out of attempts",
		slog.String("transport", e.transport), slog.String("destination", e.destination),
		slog.Int("rows", rows), slog.Int("dead", dead), slog.String("error", firstErr.Error()))
}

// finish writes back the rows t did not send and commits, which removes the
// sent rows for good. If either fails, the take rolls back: every row is back
// as it was, attempts untouched, and the sent ones will be sent again.
func (s *sender) finish(ctx context.Context, t *take) error {
	if t.sent == 0 && !t.recorded {
		// Nothing was delivered and nothing needs recording (the destination
		// was unavailable or slow, or the rows were kept unsent): rolling back
		// puts every row back as it was without writing it again, so that an
		// outage does not rewrite the backlog.
		t.tx.Rollback()
		s.stats.failed.Add(uint64(t.nfailed))
		return nil
	}
	err := t.st.Restore(ctx, t.restore)
	if err == nil {
		err = t.st.Bury(ctx, t.dead, t.reasons)
	}
	committing := err == nil
	if err == nil {
		if s.chain {
			// A failed COMMIT AND CHAIN ends the transaction on the server like a
			// failed COMMIT; the Rollback below then only closes the *sql.Tx,
			// and the caller drops the connection. (Issued in a transaction
			// that already failed, it would report no error: every failed
			// statement of a take therefore ends it at once, never reaching
			// here.)
			_, err = t.tx.ExecContext(ctx, "COMMIT AND CHAIN")
		} else {
			err = t.tx.Commit()
		}
	}
	if err != nil {
		t.tx.Rollback()
		if t.sent > 0 {
			s.stats.completionFailures.Add(1)
			var answered interface{ SQLState() string }
			if committing && !errors.As(err, &answered) {
				// The COMMIT was sent and no answer from the server came
				// back (a server error would carry a SQLSTATE): it may have
				// committed (the rows are gone) or not (they are back and
				// will be sent again).
				s.logger.Error("dispatch: commit outcome unknown after a successful send; if it did not commit, the rows will be sent again",
					slog.Int("sent", t.sent), slog.Int("rows", t.sent+len(t.restore)), slog.String("error", err.Error()))
			} else {
				s.logger.Error("dispatch: completion failed after a successful send; rolled back, the rows will be sent again",
					slog.Int("sent", t.sent), slog.Int("rows", t.sent+len(t.restore)), slog.String("error", err.Error()))
			}
		}
		return err
	}
	s.stats.deleted.Add(uint64(t.sent))
	s.stats.failed.Add(uint64(t.nfailed))
	s.stats.buried.Add(uint64(len(t.dead)))
	if s.chain {
		s.open = &take{tx: t.tx, st: t.st}
	}
	return nil
}

// send calls the transport with a deadline at the claim's expiry: a send that
// outlives its claim risks a duplicate. A transport that ignores its context is
// abandoned at the deadline (its goroutine ends when the transport returns),
// so that neither the claim protocol nor shutdown waits on it.
func send(ctx context.Context, tr relayer.Transport, msgs []*relayer.Message, until time.Time) error {
	ctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("transport panicked: %v", r)
			}
		}()
		if len(msgs) == 1 {
			done <- tr.Send(ctx, msgs[0])
		} else {
			done <- tr.SendBatch(ctx, msgs)
		}
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", errAbandoned, context.Cause(ctx))
	case <-sendCut(ctx):
		return fmt.Errorf("%w: still running %s after the worker was stopped", errAbandoned, recordGrace)
	}
}

var errAbandoned = errors.New("send abandoned at the claim deadline or shutdown")
