package consume

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/relayer-go/relayer"
)

// Sentinel errors of typed handlers; test with [errors.Is]. Each also
// matches relayer.ErrPermanent, so that the message is dead-lettered at
// once: delivering it again would not decode it.
var (
	// ErrDecode is the cause a message is dead-lettered with when its body
	// does not decode into the handler's type, its type is not the
	// handler's, or its content type is not the serializer's.
	ErrDecode = errors.New("consume: message does not decode into the handler's type")
	// ErrUnknownType is the cause a [Mux] dead-letters a message with when
	// no handler is registered for its type.
	ErrUnknownType = errors.New("consume: no handler for the message's type")
)

// Permanent marks err as one that delivering the message again cannot fix:
// returned by a handler, it sends the message to the dead letters at once
// instead of spending its attempts. The result matches both err and
// relayer.ErrPermanent with [errors.Is]; Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil || errors.Is(err, relayer.ErrPermanent) {
		return err
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string   { return e.err.Error() }
func (e *permanentError) Unwrap() []error { return []error{e.err, relayer.ErrPermanent} }

// TypedHandler is a handler of one message type T in a transaction of type
// Tx (a *Tx for [New]'s consumers, the data layer's for [NewTx]'s): it gets
// the message's body decoded into a T beside the message itself.
type TypedHandler[T, Tx any] func(ctx context.Context, tx Tx, m *relayer.Message, v T) error

// Typed returns a handler that decodes each message's body into a T with
// relayer.JSON, the writer's default serializer, then calls handle; see
// [TypedWith]. For a [New] consumer:
//
//	consume.New(db, consume.Typed(func(ctx context.Context, tx *consume.Tx, m *relayer.Message, o OrderPlaced) error {
//		_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_id) VALUES ($1)`, o.ID)
//		return err
//	}), opts)
func Typed[T, Tx any](handle TypedHandler[T, Tx]) func(ctx context.Context, tx Tx, m *relayer.Message) error {
	return TypedWith(relayer.JSON{}, handle)
}

// TypedWith returns a handler that decodes each message's body into a T
// with ser, the serializer the producer's outbox uses, then calls handle.
// A message whose type is not T's (relayer.TypeName[T]: its MessageType,
// or its Go package and type name), whose content-type header is not
// ser's, or whose body does not decode, is dead-lettered at once with an
// error wrapping [ErrDecode] and relayer.ErrPermanent; handle does not run.
// A nil ser is relayer.JSON.
func TypedWith[T, Tx any](ser relayer.Serializer, handle TypedHandler[T, Tx]) func(ctx context.Context, tx Tx, m *relayer.Message) error {
	if ser == nil {
		ser = relayer.JSON{}
	}
	typeName := relayer.TypeName[T]()
	return func(ctx context.Context, tx Tx, m *relayer.Message) error {
		v, err := decode[T](ser, typeName, m)
		if err != nil {
			return err
		}
		return handle(ctx, tx, m, v)
	}
}

// decode checks m's type and content type, and decodes its body into a T.
func decode[T any](ser relayer.Serializer, typeName string, m *relayer.Message) (T, error) {
	var v T
	if m.Type != typeName {
		return v, Permanent(fmt.Errorf("%w: the message's type is %q, the handler's %q", ErrDecode, m.Type, typeName))
	}
	if ct, ok := contentType(m); ok && !sameContentType(ct, ser.ContentType()) {
		return v, Permanent(fmt.Errorf("%w: the message's content type is %q, the serializer's %q", ErrDecode, ct, ser.ContentType()))
	}
	if err := ser.Unmarshal(m.Body, &v); err != nil {
		return v, Permanent(fmt.Errorf("%w: %s: %w", ErrDecode, typeName, err))
	}
	return v, nil
}

// contentType returns the message's content-type header, the last one.
func contentType(m *relayer.Message) (string, bool) {
	ct, found := "", false
	for _, h := range m.Headers {
		if strings.EqualFold(h.Name, relayer.HeaderContentType) {
			ct, found = string(h.Value), true
		}
	}
	return ct, found
}

// sameContentType compares media types without their parameters and case.
func sameContentType(a, b string) bool {
	media := func(s string) string {
		if i := strings.IndexByte(s, ';'); i >= 0 {
			s = s[:i]
		}
		return strings.ToLower(strings.TrimSpace(s))
	}
	return media(a) == media(b)
}

// Mux routes each message to the handler registered for its type ([On]),
// for a consumer of several types. Tx is the handler's transaction: *Tx
// for [New]'s consumers, the data layer's for [NewTx]'s. Register every
// handler before the consumer starts; a Mux is then safe for concurrent
// use. Its Handle method is the consumer's handler.
type Mux[Tx any] struct {
	ser      relayer.Serializer
	handlers map[string]func(ctx context.Context, tx Tx, m *relayer.Message) error
}

// NewMux returns an empty Mux whose handlers decode with ser (nil:
// relayer.JSON).
func NewMux[Tx any](ser relayer.Serializer) *Mux[Tx] {
	if ser == nil {
		ser = relayer.JSON{}
	}
	return &Mux[Tx]{ser: ser, handlers: map[string]func(ctx context.Context, tx Tx, m *relayer.Message) error{}}
}

// On registers handle for the messages of type T (relayer.TypeName[T]),
// decoded as [TypedWith] does with the Mux's serializer. Registering a type
// twice returns an error wrapping [ErrInvalidOptions].
func On[T, Tx any](mux *Mux[Tx], handle TypedHandler[T, Tx]) error {
	if mux == nil || handle == nil {
		return fmt.Errorf("%w: On needs a Mux and a handler", ErrInvalidOptions)
	}
	name := relayer.TypeName[T]()
	if _, ok := mux.handlers[name]; ok {
		return fmt.Errorf("%w: a handler for message type %q is registered already", ErrInvalidOptions, name)
	}
	mux.handlers[name] = TypedWith(mux.ser, handle)
	return nil
}

// Types returns the message types the Mux handles, sorted.
func (mux *Mux[Tx]) Types() []string {
	names := make([]string, 0, len(mux.handlers))
	for name := range mux.handlers {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Handle runs the handler registered for m's type. A message of a type no
// handler is registered for is dead-lettered at once, with an error
// wrapping [ErrUnknownType] and relayer.ErrPermanent.
func (mux *Mux[Tx]) Handle(ctx context.Context, tx Tx, m *relayer.Message) error {
	h, ok := mux.handlers[m.Type]
	if !ok {
		return Permanent(fmt.Errorf("%w: %q (this consumer handles %s)", ErrUnknownType, m.Type, strings.Join(mux.Types(), ", ")))
	}
	return h(ctx, tx, m)
}
