package relayer

import (
	"fmt"
	"iter"
	"maps"
	"reflect"
	"slices"
)

// Route says where messages of one type go.
type Route struct {
	// Transport is the registered name of the transport.
	Transport string
	// Destination is the transport-specific destination (topic, subject, exchange).
	Destination string
	// Ordered routes deliver messages in per-key order through lanes; every
	// message on an ordered route needs an ordering key, and the destination must
	// report [Capabilities.OrderedByKey].
	Ordered bool
	// Retry is how failed sends of this type are retried; each zero field
	// means the outbox's value ([Outbox].Retry).
	Retry Retry
}

// Routes maps message types to routes. The zero value is an empty table ready to
// use. Build it before handing it to a writer or dispatcher, which take a copy;
// Routes is not safe for concurrent modification.
type Routes struct {
	byType map[string]Route
	// goNamed holds the types AddType named after their Go type.
	goNamed map[string]bool
}

// Add registers the route for a message type. It fails with an error wrapping
// [ErrInvalidRoute] when the type, transport or destination is empty, when the
// transport name or destination is longer than [EndpointMaxBytes], or when the
// type already has a route.
func (r *Routes) Add(messageType string, route Route) error {
	switch {
	case messageType == "":
		return fmt.Errorf("%w: message type is empty", ErrInvalidRoute)
	case route.Transport == "":
		return fmt.Errorf("%w: type %q: Transport is empty", ErrInvalidRoute, messageType)
	case route.Destination == "":
		return fmt.Errorf("%w: type %q: Destination is empty", ErrInvalidRoute, messageType)
	case len(route.Transport) > EndpointMaxBytes:
		return fmt.Errorf("%w: type %q: Transport is %d bytes, over the limit of %d (EndpointMaxBytes)", ErrInvalidRoute, messageType, len(route.Transport), EndpointMaxBytes)
	case len(route.Destination) > EndpointMaxBytes:
		return fmt.Errorf("%w: type %q: Destination is %d bytes, over the limit of %d (EndpointMaxBytes)", ErrInvalidRoute, messageType, len(route.Destination), EndpointMaxBytes)
	}
	if err := route.Retry.Validate(); err != nil {
		return fmt.Errorf("%w: type %q: %w", ErrInvalidRoute, messageType, err)
	}
	if _, dup := r.byType[messageType]; dup {
		return fmt.Errorf("%w: type %q already has a route (two Go types with one name need a MessageType method)", ErrInvalidRoute, messageType)
	}
	if r.byType == nil {
		r.byType = make(map[string]Route)
	}
	r.byType[messageType] = route
	return nil
}

// AddType registers the route for the message type of T, named by [TypeName].
// A type without a MessageType method ([Typer]) is named after its Go package
// and type, so renaming either changes the name consumers see; writers warn
// about such routes (see [Routes.GoNamed]).
func AddType[T any](r *Routes, route Route) error {
	name := TypeName[T]()
	if err := r.Add(name, route); err != nil {
		return err
	}
	if !implementsTyper(reflect.TypeFor[T]()) {
		if r.goNamed == nil {
			r.goNamed = make(map[string]bool)
		}
		r.goNamed[name] = true
	}
	return nil
}

// GoNamed returns, sorted, the message types that [AddType] named after their
// Go type because it has no MessageType method. The type name travels with
// every message as a contract with consumers in other services; a
// MessageType method keeps it stable when the Go code is renamed or moved.
func (r *Routes) GoNamed() []string {
	return slices.Sorted(maps.Keys(r.goNamed))
}

// Lookup returns the route of a message type, or an error wrapping [ErrNoRoute].
func (r *Routes) Lookup(messageType string) (Route, error) {
	route, ok := r.byType[messageType]
	if !ok {
		return Route{}, fmt.Errorf("%w %q", ErrNoRoute, messageType)
	}
	return route, nil
}

// Len returns the number of registered types.
func (r *Routes) Len() int { return len(r.byType) }

// All yields every message type and its route, sorted by type.
func (r *Routes) All() iter.Seq2[string, Route] {
	return func(yield func(string, Route) bool) {
		for _, t := range slices.Sorted(maps.Keys(r.byType)) {
			if !yield(t, r.byType[t]) {
				return
			}
		}
	}
}

// Clone returns an independent copy.
func (r *Routes) Clone() *Routes {
	return &Routes{byType: maps.Clone(r.byType), goNamed: maps.Clone(r.goNamed)}
}

// Typer is implemented by messages that name their own type. MessageType must
// return the same string for every value of the type, including the zero value.
type Typer interface {
	MessageType() string
}

// TypeOf returns the message type of v: v.MessageType() when v implements
// [Typer], otherwise the Go type as package name and type name
// ("orders.OrderPlaced"), pointers dereferenced. It returns "" for nil.
func TypeOf(v any) string {
	if v == nil {
		return ""
	}
	return typeName(reflect.TypeOf(v))
}

// TypeName returns the message type of T, as [TypeOf] names it. It returns "" when
// T is an interface type.
func TypeName[T any]() string {
	return typeName(reflect.TypeFor[T]())
}

var typerType = reflect.TypeFor[Typer]()

// typeName works from the type rather than the value so that a nil pointer whose
// element type has a value-receiver MessageType never panics.
func typeName(t reflect.Type) string {
	if t.Kind() == reflect.Interface {
		return ""
	}
	base := derefType(t)
	switch {
	case base.Implements(typerType):
		return reflect.Zero(base).Interface().(Typer).MessageType()
	case reflect.PointerTo(base).Implements(typerType):
		return reflect.New(base).Interface().(Typer).MessageType()
	}
	return base.String()
}

func derefType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// implementsTyper reports whether t, its pointer or its base type names
// itself.
func implementsTyper(t reflect.Type) bool {
	base := derefType(t)
	return base.Implements(typerType) || reflect.PointerTo(base).Implements(typerType)
}
