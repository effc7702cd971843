package relayergorm

import (
	"fmt"
	"reflect"

	"gorm.io/gorm"

	"github.com/relayer-go/relayer"
)

// MessageSource is a model that records messages (domain events) while it
// changes. When such a model is created, updated or deleted through GORM, the
// plugin publishes its pending messages in the same transaction as the
// statement, then clears them.
type MessageSource interface {
	// PendingMessages returns the messages recorded since the last clear, in
	// the order they are to be written.
	PendingMessages() []relayer.Outgoing
	// ClearPendingMessages forgets the pending messages; the plugin calls it
	// once they are written in the transaction.
	ClearPendingMessages()
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

// checkTransaction refuses, before anything is written, a statement on models
// with pending messages that does not run in a plugin transaction (with
// SkipDefaultTransaction and no explicit transaction): the business rows must
// not be written without their messages.
func checkTransaction(db *gorm.DB) {
	if db.Error != nil || db.DryRun || findTx(db.Statement.ConnPool) != nil {
		return
	}
	sources := pendingSources(db)
	if len(sources) == 0 {
		return
	}
	db.AddError(fmt.Errorf("%T has pending messages: %w", sources[0], notInTransaction(db)))
}

// enlistPending writes the pending messages of the statement's models in its
// transaction, in one round trip, once the statement and its After hooks
// succeeded, and clears them.
func enlistPending(db *gorm.DB) {
	if db.Error != nil || db.DryRun {
		return
	}
	sources := pendingSources(db)
	if len(sources) == 0 {
		return
	}
	t := findTx(db.Statement.ConnPool)
	if t == nil {
		// An After hook recorded the messages, past the check.
		db.AddError(fmt.Errorf("%T has pending messages: %w", sources[0], notInTransaction(db)))
		return
	}
	var msgs []relayer.Outgoing
	for _, s := range sources {
		msgs = append(msgs, s.PendingMessages()...)
	}
	if err := t.publish(db.Statement.Context, msgs); err != nil {
		db.AddError(err)
		return
	}
	for _, s := range sources {
		s.ClearPendingMessages()
	}
}
