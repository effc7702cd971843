package relayerkafka

import (
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/relayer-go/relayer"
)

// ErrNoMessageID is returned by [MessageID] for a record without a
// relayer.HeaderMessageID header.
var ErrNoMessageID = errors.New("relayerkafka: record has no message id header")

// uuidTextLen is the length of a UUID in its canonical text form.
const uuidTextLen = 36

// MessageID returns the relayer message identity a [Transport] put on r, for
// consumers that deduplicate (the inbox, for one). It reads the last
// relayer.HeaderMessageID header: the transport appends its own after the
// message's headers, so the last one is the transport's even when a message
// carried a header of that name itself. It returns [ErrNoMessageID] when
// there is none, and a parse error when the value is not a UUID.
func MessageID(r *kgo.Record) (uuid.UUID, error) {
	if r == nil {
		return uuid.Nil, ErrNoMessageID
	}
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if h := r.Headers[i]; h.Key == relayer.HeaderMessageID {
			id, err := uuid.ParseBytes(h.Value)
			if err != nil {
				return uuid.Nil, fmt.Errorf("relayerkafka: message id header %q: %w", h.Value, err)
			}
			return id, nil
		}
	}
	return uuid.Nil, ErrNoMessageID
}

// batch holds the records of one send. records[i] belongs to message i; it is
// nil when message i cannot be produced at all, and errs[i] says why.
type batch struct {
	records []*kgo.Record
	errs    []error
	// produce lists the records to hand to the client, in message order.
	produce []*kgo.Record
}

// newBatch maps msgs to Kafka records: destination to topic, key to record
// key, body to value, headers to record headers in order followed by the
// identity and type headers.
//
// Every byte the records point to is copied into one buffer. A send that
// returns at its context's deadline leaves its records with the client until
// the client settles them (see [Transport.Send]), while the caller may reuse
// the messages' memory as soon as the send returns; the copy keeps the two
// apart, at the cost of one allocation per batch.
func newBatch(msgs []*relayer.Message) batch {
	b := batch{
		records: make([]*kgo.Record, len(msgs)),
		errs:    make([]error, len(msgs)),
	}
	size, nheaders, valid := 0, 0, 0
	for i, m := range msgs {
		if err := check(m); err != nil {
			b.errs[i] = err
			continue
		}
		valid++
		size += len(m.Key) + len(m.Body) + uuidTextLen + len(m.Type)
		for _, h := range m.Headers {
			size += len(h.Value)
		}
		nheaders += len(m.Headers) + 2
	}
	if valid == 0 {
		return b
	}
	var (
		recs = make([]kgo.Record, valid)
		hdrs = make([]kgo.RecordHeader, 0, nheaders)
		buf  = make([]byte, 0, size)
	)
	// bytesOf appends p to buf and returns the copy, capped so that no later
	// append can write over it. It is never nil, so that an empty body is
	// sent as an empty value rather than a null one (a tombstone).
	bytesOf := func(p []byte) []byte {
		start := len(buf)
		buf = append(buf, p...)
		return buf[start:len(buf):len(buf)]
	}
	b.produce = make([]*kgo.Record, 0, valid)
	for i, m := range msgs {
		if b.errs[i] != nil {
			continue
		}
		r := &recs[len(b.produce)]
		r.Topic = m.Destination
		if m.Key != "" {
			start := len(buf)
			buf = append(buf, m.Key...)
			r.Key = buf[start:len(buf):len(buf)]
		}
		r.Value = bytesOf(m.Body)
		first := len(hdrs)
		for _, h := range m.Headers {
			hdrs = append(hdrs, kgo.RecordHeader{Key: h.Name, Value: bytesOf(h.Value)})
		}
		start := len(buf)
		buf = buf[:start+uuidTextLen]
		encodeUUID(buf[start:], m.ID)
		hdrs = append(hdrs, kgo.RecordHeader{Key: relayer.HeaderMessageID, Value: buf[start:len(buf):len(buf)]})
		start = len(buf)
		buf = append(buf, m.Type...)
		hdrs = append(hdrs, kgo.RecordHeader{Key: relayer.HeaderMessageType, Value: buf[start:len(buf):len(buf)]})
		r.Headers = hdrs[first:len(hdrs):len(hdrs)]
		b.records[i] = r
		b.produce = append(b.produce, r)
	}
	return b
}

// check reports why m can never be produced, or nil.
func check(m *relayer.Message) error {
	switch {
	case m == nil:
		return fmt.Errorf("relayerkafka: %w: nil message", relayer.ErrPermanent)
	case m.Destination == "":
		// The client would fall back to its DefaultProduceTopic; a message
		// without a destination is a routing mistake, not a request for it.
		return fmt.Errorf("relayerkafka: %w: message %s has no destination topic", relayer.ErrPermanent, m.ID)
	case !validTopic(m.Destination):
		// Brokers answer such a name with INVALID_TOPIC_EXCEPTION or, like
		// some test clusters, as an unknown topic, which would be retried
		// forever.
		return fmt.Errorf("relayerkafka: %w: %w: %q is not a valid topic name (1 to 249 of a-z, A-Z, 0-9, '.', '_', '-'; not \".\" or \"..\")",
			relayer.ErrPermanent, kerr.InvalidTopicException, m.Destination)
	}
	return nil
}

// validTopic reports whether name is a legal Kafka topic name.
func validTopic(name string) bool {
	if len(name) == 0 || len(name) > 249 || name == "." || name == ".." {
		return false
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// encodeUUID writes id in its canonical text form to dst, which must hold
// uuidTextLen bytes; it is uuid.UUID.String without the allocation. The
// core's array parameters encode ids the same way (internal/storesql),
// which this module, published on its own, does not import.
func encodeUUID(dst []byte, id uuid.UUID) {
	hex.Encode(dst[0:8], id[0:4])
	dst[8] = '-'
	hex.Encode(dst[9:13], id[4:6])
	dst[13] = '-'
	hex.Encode(dst[14:18], id[6:8])
	dst[18] = '-'
	hex.Encode(dst[19:23], id[8:10])
	dst[23] = '-'
	hex.Encode(dst[24:36], id[10:16])
}
