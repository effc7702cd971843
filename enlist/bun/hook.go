package relayerbun

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/relayer-go/relayer/enlist"
)

// The statements bun reports to query hooks when a transaction begins and ends
// (db.go of bun v1.3.0). A savepoint's commit and rollback are reported as
// "RELEASE SAVEPOINT <name>" and "ROLLBACK TO SAVEPOINT <name>", which match
// none of them.
const (
	stmtBegin    = "BEGIN"
	stmtCommit   = "COMMIT"
	stmtRollback = "ROLLBACK"
)

// Hook is the bun query hook that gives each transaction of a bun.DB its
// outbox side and tells the writer's listener about the published rows after
// the outermost commit. Install one per bun.DB, before transactions begin:
//
//	db = db.WithQueryHook(relayerbun.NewHook(writer))
//
// A bun.Tx names no writer, so hooks of two different writers on one bun.DB
// make every Publish and [BeginTx] on it fail. A Hook is safe for concurrent
// use and may serve several bun.DBs.
type Hook struct {
	w *enlist.Writer
}

var _ bun.QueryHook = (*Hook)(nil)

// NewHook returns the hook for writer w. It panics if w is nil.
func NewHook(w *enlist.Writer) *Hook {
	if w == nil {
		panic("relayerbun: NewHook: nil *enlist.Writer")
	}
	return &Hook{w: w}
}

// BeforeQuery implements bun.QueryHook. On BEGIN it returns ctx with the
// transaction's state: the fresh one [BeginTx] put in ctx, which it claims, or
// else a new one. bun keeps that context in the bun.Tx, passes it to the
// callback of db.RunInTx and to the hooks of the transaction's COMMIT or
// ROLLBACK. Other statements pass through untouched.
func (h *Hook) BeforeQuery(ctx context.Context, ev *bun.QueryEvent) context.Context {
	if ev.IQuery != nil || ev.Query != stmtBegin {
		return ctx
	}
	outer := stateIn(ctx)
	if outer != nil {
		outer.mu.Lock()
		switch {
		case outer.begin == ev:
			// Another relayerbun hook on this DB already made or claimed
			// the state of this BEGIN.
			if outer.hook.w != h.w {
				outer.dup = true
			}
			outer.mu.Unlock()
			return ctx
		case outer.hook == nil && !outer.ended:
			// Made by BeginTx for this BEGIN.
			outer.hook = h
			outer.dialect = ev.DB.Dialect()
			outer.begin = ev
			outer.mu.Unlock()
			return ctx
		}
		outer.mu.Unlock()
	}
	// A new transaction always gets a new state, even when ctx carries the
	// state of the transaction in whose callback it begins.
	return context.WithValue(ctx, stateKey{}, newChild(h, ev, outer))
}

// AfterQuery implements bun.QueryHook. After a COMMIT that succeeded it hands
// the transaction's rows to the writer's listener; after a failed BEGIN, a
// failed COMMIT or any ROLLBACK it drops them. Either way the transaction's
// state is released.
func (h *Hook) AfterQuery(ctx context.Context, ev *bun.QueryEvent) {
	if ev.IQuery != nil {
		return
	}
	var committed bool
	switch ev.Query {
	case stmtBegin:
		s := h.own(ctx)
		if s == nil {
			return
		}
		if ev.Err == nil {
			s.mu.Lock()
			if s.begin == ev {
				s.begin = nil
			}
			s.mu.Unlock()
			return
		}
	case stmtCommit:
		// The commit is known to have happened only when it returned no
		// error; after any other outcome the rows are left to recovery.
		committed = ev.Err == nil
	case stmtRollback:
	default:
		return
	}
	s := h.own(ctx)
	if s == nil {
		return
	}
	e := s.end()
	if e == nil {
		return
	}
	if committed {
		e.Committed()
	} else {
		e.RolledBack()
	}
}

// own returns the state in ctx if this hook made it.
func (h *Hook) own(ctx context.Context) *txState {
	s := stateIn(ctx)
	if s == nil {
		return nil
	}
	s.mu.Lock()
	mine := s.hook == h
	s.mu.Unlock()
	if !mine {
		return nil
	}
	return s
}
