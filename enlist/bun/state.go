package relayerbun

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"sync"
	"weak"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
)

// stateKey is the context key of a transaction's *txState.
type stateKey struct{}

// txState is the outbox side of one bun transaction.
//
// The hook makes it when bun reports the transaction's BEGIN and returns it in
// the context bun keeps in the bun.Tx, hands to the callback of db.RunInTx and
// passes to the hooks of the transaction's COMMIT and ROLLBACK. [BeginTx] makes
// it itself, unclaimed, and the BEGIN hook claims it instead of making a new
// one.
//
// The state is bound to the transaction's *sql.Tx by [BeginTx] right after the
// BEGIN, or by the first publish that finds it in its context; binding
// registers it under the *sql.Tx and creates the enlistment. COMMIT or
// ROLLBACK ends it.
type txState struct {
	// parent is the nearest live state that was in the context of this
	// state's BEGIN: a transaction begun inside another's callback has the
	// other as parent. Set at creation, never changed.
	parent *txState

	mu      sync.Mutex
	hook    *Hook           // the hook that made or claimed the state; nil while unclaimed
	dialect schema.Dialect  // of the bun.DB whose BEGIN the hook saw
	begin   *bun.QueryEvent // the BEGIN event until it completes
	dup     bool            // a second hook, of another writer, saw the BEGIN
	ended   bool
	pending int  // live descendants that are not bound yet (see find)
	counted bool // this state is counted in its ancestors' pending
	key     weak.Pointer[sql.Tx]
	e       *enlist.Enlistment // non-nil once bound
	gone    runtime.Cleanup    // forgets key if the transaction is dropped unended
}

// bound maps the *sql.Tx of every bound transaction that has not ended to its
// state. It is what Publish consults first, so that a bun.Tx of the
// transaction, or of a savepoint of it, finds the state with any context. Keys
// are weak: a transaction that never ends through bun (committed on the
// embedded *sql.Tx, or abandoned) is forgotten when its *sql.Tx is garbage.
var bound sync.Map // weak.Pointer[sql.Tx] -> *txState

func forget(key weak.Pointer[sql.Tx]) { bound.Delete(key) }

var (
	errZeroTx = fmt.Errorf("%w: relayerbun: zero bun.Tx", relayer.ErrNotInTransaction)
	errNoHook = fmt.Errorf("%w: relayerbun: the bun.DB has no relayerbun hook (install it with db.WithQueryHook(relayerbun.NewHook(writer)) before beginning transactions)", relayer.ErrNotInTransaction)
	errNoTx   = fmt.Errorf("%w: relayerbun: no outbox state for this transaction: it has ended, or it was begun without relayerbun and the context passed to Publish is not its own (begin with relayerbun.BeginTx, or publish inside db.RunInTx with the context it passes)", relayer.ErrNotInTransaction)
	errOther  = fmt.Errorf("%w: relayerbun: the context passed to Publish belongs to another transaction (begin with relayerbun.BeginTx, or publish inside db.RunInTx with the context it passes)", relayer.ErrNotInTransaction)
	errUnsure = fmt.Errorf("%w: relayerbun: cannot tell which transaction this bun.Tx is: another transaction was begun with the context passed to Publish, is still open and has not published, and a bun.Tx does not say which of the two it is (begin the other transaction with relayerbun.BeginTx, or publish on this one before beginning it)", relayer.ErrNotInTransaction)
	errEnded  = fmt.Errorf("%w: relayerbun: the transaction has ended", relayer.ErrNotInTransaction)
	errTwo    = fmt.Errorf("%w: relayerbun: the bun.DB has hooks of two writers; install one relayerbun hook per bun.DB", relayer.ErrNotInTransaction)
)

// newChild returns a new state made by h for the BEGIN ev, whose context
// carried outer (nil if none). The live ancestors count it as pending until it
// is bound or ends.
func newChild(h *Hook, ev *bun.QueryEvent, outer *txState) *txState {
	s := &txState{hook: h, dialect: ev.DB.Dialect(), begin: ev}
	for p := outer; p != nil; p = p.parent {
		p.mu.Lock()
		live := !p.ended
		p.mu.Unlock()
		if live {
			s.parent = p
			break
		}
	}
	if s.parent != nil {
		s.counted = true
		s.parent.addPending(1)
	}
	return s
}

// addPending adds n to the pending count of s and all its ancestors.
func (s *txState) addPending(n int) {
	for p := s; p != nil; p = p.parent {
		p.mu.Lock()
		p.pending += n
		p.mu.Unlock()
	}
}

// uncount stops counting s in its ancestors' pending, once. It is called with
// s.mu held; ancestors are locked after descendants, never the other way.
func (s *txState) uncount() {
	if s.counted {
		s.counted = false
		s.parent.addPending(-1)
	}
}

// stateIn returns the nearest state in ctx, or nil.
func stateIn(ctx context.Context) *txState {
	if ctx == nil {
		return nil
	}
	s, _ := ctx.Value(stateKey{}).(*txState)
	return s
}

// bindLocked binds s, unbound and live, to tx: it registers s under key and
// creates the enlistment. s.mu is held.
func (s *txState) bindLocked(tx *sql.Tx, key weak.Pointer[sql.Tx]) (*enlist.Enlistment, error) {
	if prev, loaded := bound.LoadOrStore(key, s); loaded && prev != s {
		// Another state was bound to this transaction meanwhile: the state
		// in ctx is not this transaction's.
		return nil, errOther
	}
	s.key = key
	s.e = s.hook.w.Enlist()
	s.gone = runtime.AddCleanup(tx, forget, key)
	s.uncount()
	return s.e, nil
}

// enlistment returns the enlistment of s, found in the registry under key.
func (s *txState) enlistment() (*enlist.Enlistment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.dup:
		return nil, errTwo
	case s.ended:
		return nil, errEnded
	}
	return s.e, nil
}

// bindFromContext returns the enlistment of s, a state found in the context
// passed to Publish, for the transaction tx: s serves it only if it is bound
// to tx, or if it is unbound and nothing suggests it belongs to another
// transaction, in which case it is bound to tx now.
func (s *txState) bindFromContext(tx *bun.Tx, key weak.Pointer[sql.Tx]) (*enlist.Enlistment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.hook == nil:
		// Made by a BeginTx whose BEGIN no hook claimed.
		return nil, errNoTx
	case s.e != nil && s.key != key:
		return nil, errOther
	case s.ended:
		return nil, errEnded
	case s.dup:
		return nil, errTwo
	case s.e != nil:
		return s.e, nil
	case s.begin != nil:
		// The BEGIN that made s has not completed: its transaction cannot
		// be the one in hand.
		return nil, errOther
	case s.pending > 0:
		return nil, errUnsure
	case !sameDialect(tx, s.dialect):
		// tx was begun by a bun.DB with another dialect than the one whose
		// BEGIN made s: most likely a DB without the hook, begun inside the
		// callback of a transaction of one with it.
		return nil, errOther
	}
	return s.bindLocked(tx.Tx, key)
}

// sameDialect reports whether tx was begun by a bun.DB with dialect d. It
// tells two bun.DBs apart only when they were made with different dialect
// values; copies made by WithQueryHook share theirs.
func sameDialect(tx *bun.Tx, d schema.Dialect) (same bool) {
	defer func() {
		// A bun.Tx assembled by hand has no DB, and a dialect type might not
		// be comparable: neither is the same dialect.
		if recover() != nil {
			same = false
		}
	}()
	return d != nil && tx.Dialect() == d
}

// end ends the state once and returns its enlistment, nil if it was never
// bound or had already ended.
func (s *txState) end() *enlist.Enlistment {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return nil
	}
	s.ended = true
	s.begin = nil
	s.uncount()
	if s.e == nil {
		return nil
	}
	bound.CompareAndDelete(s.key, s)
	s.gone.Stop()
	return s.e
}
