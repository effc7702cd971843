package relayergorm

import (
	"fmt"
	"reflect"
	"slices"

	"gorm.io/gorm"

	"github.com/relayer-go/relayer"
)

// MessageSource is a model that records messages (domain events) while it
// changes. When such a model is created, updated or deleted through GORM, the
// plugin checks its pending messages before the statement runs and writes them
// in the same transaction after it. They stay pending until that transaction
// commits: if it rolls back, or the savepoint the statement ran in does, the
// next save writes them again. Within one transaction, each save writes only
// the messages recorded since the previous one.
//
// The plugin tells those apart by counting: until the transaction ends, it
// takes the first messages a model returns as the ones it wrote. A model only
// appends to its pending messages; the plugin alone forgets them.
type MessageSource interface {
	// PendingMessages returns the messages recorded since the last clear, in
	// the order they are to be written.
	PendingMessages() []relayer.Outgoing
	// ClearPendingMessages forgets the pending messages. The plugin calls it
	// after the outermost commit of a transaction that wrote all of them; a
	// model that recorded more since its last save in that transaction
	// keeps them all (the written ones are then written again at its next
	// save), unless it is a [MessageTrimmer].
	ClearPendingMessages()
}

// MessageTrimmer is a [MessageSource] that can forget part of its pending
// messages. After a commit, the plugin makes it forget exactly the messages
// the transaction wrote, and it keeps those recorded since its last save for
// the next one. [Messages] is a MessageTrimmer.
type MessageTrimmer interface {
	MessageSource
	// TrimPendingMessages forgets the first n pending messages, or all of
	// them when there are fewer.
	TrimPendingMessages(n int)
}

// Messages is an embeddable [MessageSource]. A model embeds it and records
// messages as its state changes:
//
//	type Order struct {
//		ID     int64
//		Status string
//		relayergorm.Messages
//	}
//
//	func (o *Order) Cancel() {
//		o.Status = "cancelled"
//		o.Record(OrderCancelled{ID: o.ID}, relayer.Key(strconv.FormatInt(o.ID, 10)))
//	}
//
// It has no exported fields, so GORM maps no column for it. It is not safe for
// concurrent use, like the model it is part of.
type Messages struct {
	pending []relayer.Outgoing
}

// Record adds a message to publish with the model's next Create, Update or
// Delete.
func (m *Messages) Record(msg any, opts ...relayer.Option) {
	m.pending = append(m.pending, relayer.NewOutgoing(msg, opts...))
}

// PendingMessages implements [MessageSource].
func (m *Messages) PendingMessages() []relayer.Outgoing { return m.pending }

// ClearPendingMessages implements [MessageSource].
func (m *Messages) ClearPendingMessages() { m.pending = nil }

// TrimPendingMessages implements [MessageTrimmer].
func (m *Messages) TrimPendingMessages(n int) {
	if n >= len(m.pending) {
		m.pending = nil
		return
	}
	// A copy, so that the forgotten messages are not kept reachable.
	m.pending = slices.Clone(m.pending[n:])
}

var sourceType = reflect.TypeFor[MessageSource]()

// pendingSources returns the models of db's statement that have pending
// messages: the statement's value, or each element of it when it is a slice or
// an array.
func pendingSources(db *gorm.DB) []MessageSource {
	v := db.Statement.ReflectValue
	if !v.IsValid() {
		return nil
	}
	switch v.Kind() {
	case reflect.Slice, reflect.Array:
		if !mayBeSource(v.Type().Elem()) {
			return nil
		}
		var sources []MessageSource
		for i := range v.Len() {
			if s := sourceOf(v.Index(i)); s != nil {
				sources = append(sources, s)
			}
		}
		return sources
	default:
		if s := sourceOf(v); s != nil {
			return []MessageSource{s}
		}
		return nil
	}
}

// mayBeSource reports whether a value of type t can hold a MessageSource, so
// that slices of other models are not walked.
func mayBeSource(t reflect.Type) bool {
	for {
		switch {
		case t.Kind() == reflect.Interface, t.Implements(sourceType), reflect.PointerTo(t).Implements(sourceType):
			return true
		case t.Kind() == reflect.Pointer:
			t = t.Elem()
		default:
			return false
		}
	}
}

// sourceOf returns v as a MessageSource with pending messages, or nil.
func sourceOf(v reflect.Value) MessageSource {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		if s, ok := v.Interface().(MessageSource); ok {
			return pending(s)
		}
		v = v.Elem()
	}
	if v.CanAddr() {
		if s, ok := v.Addr().Interface().(MessageSource); ok {
			return pending(s)
		}
	}
	if v.CanInterface() {
		if s, ok := v.Interface().(MessageSource); ok {
			return pending(s)
		}
	}
	return nil
}

func pending(s MessageSource) MessageSource {
	if len(s.PendingMessages()) == 0 {
		return nil
	}
	return s
}

// checkStatement runs before anything is written. It refuses a statement on
// models with pending messages that does not run in a plugin transaction (with
// SkipDefaultTransaction and no explicit transaction), and one whose messages
// the writer would refuse: in an explicit transaction, a statement that failed
// after writing its business rows would leave them to be committed without
// their messages.
func checkStatement(db *gorm.DB) {
	t, sources := pendingInTx(db)
	if t == nil {
		return
	}
	if err := t.validate(db.Statement.Context, t.written.unwritten(sources).msgs); err != nil {
		db.AddError(err)
	}
}

// enlistPending writes the pending messages of the statement's models that its
// transaction has not written yet, in one round trip, once the statement and
// its After hooks succeeded. The models keep them pending until the commit.
func enlistPending(db *gorm.DB) {
	t, sources := pendingInTx(db)
	if t == nil {
		return
	}
	p := t.written.unwritten(sources)
	if len(p.msgs) == 0 {
		return
	}
	if err := t.publish(db.Statement.Context, p.msgs); err != nil {
		db.AddError(err)
		return
	}
	t.written.wrote(p)
}

// pendingInTx returns the plugin transaction a statement runs in and its
// models with pending messages, for the callbacks that check and write those
// messages. The transaction is nil when there is nothing to do: the statement
// failed or is a dry run, no model has pending messages, or it runs outside a
// plugin transaction, which is an error added to db (checkStatement refuses
// such a statement; enlistPending still meets one when an After hook
// recorded the messages, past the check).
func pendingInTx(db *gorm.DB) (*txConn, []MessageSource) {
	if db.Error != nil || db.DryRun {
		return nil, nil
	}
	sources := pendingSources(db)
	if len(sources) == 0 {
		return nil, nil
	}
	t := findTx(db.Statement.ConnPool)
	if t == nil {
		db.AddError(fmt.Errorf("%T has pending messages: %w", sources[0], notInTransaction(db)))
		return nil, nil
	}
	return t, sources
}

// trackSavepoint follows the savepoints of the statement's transaction, after
// a raw statement (db.Exec) succeeded: GORM's nested db.Transaction and
// db.SavePoint, db.RollbackTo set and roll back savepoints that way.
func trackSavepoint(db *gorm.DB) {
	if db.Error != nil || db.DryRun {
		return
	}
	if t := findTx(db.Statement.ConnPool); t != nil {
		t.written.savepointStatement(db.Statement.SQL.String())
	}
}
