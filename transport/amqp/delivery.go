package relayeramqp

import (
	"fmt"
	"slices"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
)

// MessageID returns the relayer message id of a delivery, for deduplication
// (see package inbox). It reads the message-id property, which the transport
// sets, and falls back to a [relayer.HeaderMessageID] header for messages
// that reached the queue another way. It fails with [ErrNoMessageID] when
// there is neither, and with a parse error when the id is not a UUID.
func MessageID(d amqp.Delivery) (uuid.UUID, error) {
	s := d.MessageId
	if s == "" {
		switch v := d.Headers[relayer.HeaderMessageID].(type) {
		case string:
			s = v
		case []byte:
			s = string(v)
		}
	}
	if s == "" {
		return uuid.Nil, ErrNoMessageID
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, fmt.Errorf("relayeramqp: message id %q: %w", s, err)
	}
	return id, nil
}

// Headers decodes a table the transport wrote back into headers: a string or
// byte-array value is one header, an array is one header per element, in
// order. The table is a map, so the order between different names is lost in
// transit; Headers returns them sorted by name, repeated names in the order
// they were sent. The ordering key, when the message had one, is among them
// under [HeaderKey]. A value of any other type — such as the x-death table
// RabbitMQ adds when it dead-letters a message — fails with an error wrapping
// [ErrHeaderType] that names the header; remove such entries first to decode
// the rest.
func Headers(t amqp.Table) ([]headers.Header, error) {
	if len(t) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(t))
	for name := range t {
		names = append(names, name)
	}
	slices.Sort(names)
	hs := make([]headers.Header, 0, len(t))
	for _, name := range names {
		switch v := t[name].(type) {
		case []any:
			for i, e := range v {
				b, ok := fieldBytes(e)
				if !ok {
					return nil, fmt.Errorf("%w: header %q, element %d, is a %T", ErrHeaderType, name, i, e)
				}
				hs = append(hs, headers.Header{Name: name, Value: b})
			}
		default:
			b, ok := fieldBytes(v)
			if !ok {
				return nil, fmt.Errorf("%w: header %q is a %T", ErrHeaderType, name, v)
			}
			hs = append(hs, headers.Header{Name: name, Value: b})
		}
	}
	return hs, nil
}

func fieldBytes(v any) ([]byte, bool) {
	switch v := v.(type) {
	case string:
		return []byte(v), true
	case []byte:
		return v, true
	}
	return nil, false
}

// brokerHeaders are the headers RabbitMQ adds when it dead-letters a
// message (as a retry queue does when a retried message's wait ends) or
// counts a quorum queue's deliveries: tables and numbers, not the
// message's.
var brokerHeaders = []string{
	"x-death", "x-delivery-count",
	"x-first-death-exchange", "x-first-death-queue", "x-first-death-reason",
	"x-last-death-exchange", "x-last-death-queue", "x-last-death-reason",
}

// ReceivedMessage returns the relayer.Message a [Transport] published as
// d: its id ([MessageID]), type, key (the [HeaderKey] header), body,
// creation time (the timestamp property, to the second), and headers —
// sorted by name, as [Headers] returns them, without the key, the headers
// [Consume] adds to a retried message and those RabbitMQ adds when it
// dead-letters one. Its Destination is the routing key the message was
// published with, also after a retry. The message's Transport and trace
// context are not carried. A delivery without a message id fails with
// [ErrNoMessageID].
func ReceivedMessage(d amqp.Delivery) (relayer.Message, error) {
	id, err := MessageID(d)
	if err != nil {
		return relayer.Message{}, err
	}
	m := relayer.Message{ID: id, Type: d.Type, Destination: d.RoutingKey, Body: d.Body, CreatedAt: d.Timestamp}
	if len(d.Headers) == 0 {
		return m, nil
	}
	t := make(amqp.Table, len(d.Headers))
	for k, v := range d.Headers {
		t[k] = v
	}
	for _, name := range brokerHeaders {
		delete(t, name)
	}
	delete(t, HeaderAttempts)
	if v, ok := t[HeaderDestination]; ok {
		delete(t, HeaderDestination)
		if s, ok := v.(string); ok {
			m.Destination = s
		}
	}
	// The key is the last value under HeaderKey: the transport appends it
	// to a header of the same name the message had.
	switch v := t[HeaderKey].(type) {
	case string:
		m.Key = v
		delete(t, HeaderKey)
	case []byte:
		m.Key = string(v)
		delete(t, HeaderKey)
	case []any:
		if len(v) > 0 {
			b, ok := fieldBytes(v[len(v)-1])
			if !ok {
				return relayer.Message{}, fmt.Errorf("%w: header %q, element %d, is a %T", ErrHeaderType, HeaderKey, len(v)-1, v[len(v)-1])
			}
			m.Key = string(b)
			if rest := v[:len(v)-1]; len(rest) == 1 {
				t[HeaderKey] = rest[0]
			} else {
				t[HeaderKey] = rest
			}
		}
	}
	if m.Headers, err = Headers(t); err != nil {
		return relayer.Message{}, err
	}
	return m, nil
}
