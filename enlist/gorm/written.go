package relayergorm

import (
	"reflect"
	"strings"
	"sync"

	"github.com/relayer-go/relayer"
)

// written is what one transaction wrote of its models' pending messages. The
// messages stay pending on the models until the outermost commit: a rollback,
// of the transaction or of a savepoint, takes the rows back, and the models
// must then write them again at their next save (a retried transaction saves
// the same models). Until then, each save writes only what the transaction has
// not written yet, so a model saved twice does not publish twice.
//
// A model's pending messages are taken as an append-only log: the transaction
// remembers how many of the first ones it wrote.
type written struct {
	mu sync.Mutex
	// marks finds a model's mark; models that cannot be map keys have none
	// and are written whole at each save.
	marks map[any]*mark
	// all holds every mark, in the order of first write, for the commit.
	all []*mark
	// undo holds the count each write replaced, newest last, so that a
	// savepoint's rollback can restore the counts of when it was set.
	undo []undoEntry
	// savepoints are the open savepoints, innermost last.
	savepoints []savepoint
}

// mark is how many of a model's first pending messages the transaction wrote.
type mark struct {
	src   MessageSource
	keyed bool
	n     int
}

type undoEntry struct {
	m    *mark
	prev int
}

type savepoint struct {
	name string
	undo int // len(written.undo) when it was set
}

// plan is what a statement is to write: the messages, and the count of each
// model once they are written.
type plan struct {
	msgs  []relayer.Outgoing
	marks []planned
}

type planned struct {
	src MessageSource
	key any // nil when src cannot be a map key
	n   int
}

// identity returns s as a map key, or false when s's dynamic value is not
// comparable (a struct holding a slice, with value receivers) and using it as
// a key would panic.
func identity(s MessageSource) (any, bool) {
	if !reflect.ValueOf(s).Comparable() {
		return nil, false
	}
	return s, true
}

// unwritten returns the pending messages of sources that the transaction has
// not written, in order. A model that appears twice in the statement is
// counted once.
func (w *written) unwritten(sources []MessageSource) plan {
	w.mu.Lock()
	defer w.mu.Unlock()
	var p plan
	var seen map[any]bool
	for _, s := range sources {
		key, keyed := identity(s)
		n := 0
		if keyed {
			if seen[key] {
				continue
			}
			if seen == nil {
				seen = make(map[any]bool, len(sources))
			}
			seen[key] = true
			if m := w.marks[key]; m != nil {
				n = m.n
			}
		}
		pending := s.PendingMessages()
		if n > len(pending) {
			// Cleared and recorded anew since the last write.
			n = 0
		}
		if n == len(pending) {
			continue
		}
		p.msgs = append(p.msgs, pending[n:]...)
		p.marks = append(p.marks, planned{src: s, key: key, n: len(pending)})
	}
	return p
}

// wrote records that the messages of p are written.
func (w *written) wrote(p plan) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, pm := range p.marks {
		var m *mark
		if pm.key != nil {
			m = w.marks[pm.key]
		}
		if m == nil {
			m = &mark{src: pm.src, keyed: pm.key != nil}
			if m.keyed {
				if w.marks == nil {
					w.marks = make(map[any]*mark)
				}
				w.marks[pm.key] = m
			}
			w.all = append(w.all, m)
		}
		w.undo = append(w.undo, undoEntry{m: m, prev: m.n})
		m.n = pm.n
	}
}

// savepointStatement follows the savepoints PostgreSQL keeps for the
// transaction, from a statement that ran successfully in it. GORM sets and
// rolls back the savepoints of nested db.Transaction calls with such
// statements (through db.Exec), and has no hook of its own for them.
func (w *written) savepointStatement(query string) {
	op, name, ok := parseSavepoint(query)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	i := len(w.savepoints) - 1
	for ; i >= 0 && w.savepoints[i].name != name; i-- {
	}
	switch op {
	case opSavepoint:
		w.savepoints = append(w.savepoints, savepoint{name: name, undo: len(w.undo)})
	case opRelease:
		// Its writes now belong to the enclosing savepoint or transaction.
		if i >= 0 {
			w.savepoints = w.savepoints[:i]
		}
	case opRollbackTo:
		// PostgreSQL keeps the savepoint and drops the later ones. One this
		// transaction did not see being set (set through another path) may be
		// older than every write: all of them are undone, so that the next
		// saves write too much rather than too little.
		to := 0
		if i >= 0 {
			to = w.savepoints[i].undo
			w.savepoints = w.savepoints[:i+1]
		} else {
			w.savepoints = nil
		}
		for j := len(w.undo) - 1; j >= to; j-- {
			w.undo[j].m.n = w.undo[j].prev
		}
		w.undo = w.undo[:to]
	}
}

// committed forgets, on each model, the messages the transaction wrote, after
// the outermost commit succeeded. It is called once, when the transaction
// ends.
func (w *written) committed() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.all {
		if m.n == 0 {
			continue
		}
		switch s := m.src.(type) {
		case MessageTrimmer:
			if m.keyed {
				s.TrimPendingMessages(m.n)
			} else {
				// Another mark may stand for the same model: trimming
				// once per mark could forget unwritten messages.
				s.ClearPendingMessages()
			}
		default:
			// Without TrimPendingMessages, clearing would also forget the
			// messages recorded since the model's last save. Those are
			// kept, and the written ones with them: publishing twice is
			// recoverable, losing a message is not.
			if len(s.PendingMessages()) <= m.n || !m.keyed {
				s.ClearPendingMessages()
			}
		}
	}
	w.reset()
}

// rolledBack forgets what the transaction wrote; the models keep their
// messages pending.
func (w *written) rolledBack() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reset()
}

// reset drops the references to the models, which a *gorm.DB holding the
// ended transaction would otherwise keep alive.
func (w *written) reset() {
	w.marks, w.all, w.undo, w.savepoints = nil, nil, nil, nil
}

type savepointOp int

const (
	opSavepoint savepointOp = iota + 1
	opRelease
	opRollbackTo
)

// parseSavepoint recognizes SAVEPOINT name, RELEASE [SAVEPOINT] name and
// ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name, with PostgreSQL's
// identifier rules for the name: folded to lower case unless double-quoted.
func parseSavepoint(query string) (op savepointOp, name string, ok bool) {
	rest := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(query), ";"))
	// take drops the keyword kw from the start of rest, if it is there.
	take := func(kw string) bool {
		if len(rest) <= len(kw) || !strings.EqualFold(rest[:len(kw)], kw) || !isSpace(rest[len(kw)]) {
			return false
		}
		rest = strings.TrimSpace(rest[len(kw):])
		return true
	}
	switch {
	case take("SAVEPOINT"):
		op = opSavepoint
	case take("RELEASE"):
		op = opRelease
		take("SAVEPOINT")
	case take("ROLLBACK"):
		op = opRollbackTo
		_ = take("WORK") || take("TRANSACTION")
		if !take("TO") {
			return 0, "", false
		}
		take("SAVEPOINT")
	default:
		return 0, "", false
	}
	if name, ok = identifier(rest); !ok {
		return 0, "", false
	}
	return op, name, true
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// identifier returns the name an identifier token stands for.
func identifier(tok string) (string, bool) {
	if tok == "" {
		return "", false
	}
	if len(tok) >= 2 && tok[0] == '"' && tok[len(tok)-1] == '"' {
		return strings.ReplaceAll(tok[1:len(tok)-1], `""`, `"`), true
	}
	if strings.ContainsAny(tok, " \t\r\n\"") { // not one identifier
		return "", false
	}
	return strings.ToLower(tok), true
}
