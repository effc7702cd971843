package relayeramqp

import (
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/relayer-go/relayer"
)

// publisher is one confirm-mode channel and the listeners the transport
// registered on it. A publisher belongs to one send at a time (see
// Transport.busy); its fields are only touched by that send.
type publisher struct {
	ch *amqp.Channel
	// closes receives the broker's reason when it closes the channel; the
	// client closes it on a graceful close.
	closes chan *amqp.Error
	// returns receives mandatory messages the broker could not route. The
	// client's reader goroutine delivers each return before the confirm of the
	// same message, and gives up on a full listener only after a timeout that
	// stalls the whole connection, so the buffer holds a full batch: a send
	// publishes at most MaxBatchSize messages and takes every return before
	// the next send starts.
	returns chan amqp.Return
	// closed is set once the channel was seen closed; reason is the broker's
	// reason, nil for a close without one.
	closed bool
	reason *amqp.Error
}

// open opens a channel on conn in confirm mode.
func (p *publisher) open(conn *amqp.Connection, maxBatch int) error {
	if conn.IsClosed() {
		return unavailable("opening a channel", amqp.ErrClosed)
	}
	ch, err := conn.Channel()
	if err != nil {
		return unavailable("opening a channel", err)
	}
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	returns := ch.NotifyReturn(make(chan amqp.Return, maxBatch))
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return unavailable("putting a channel in confirm mode", err)
	}
	p.reset()
	p.ch, p.closes, p.returns = ch, closes, returns
	return nil
}

func (p *publisher) reset() {
	*p = publisher{}
}

// alive reports whether the channel is open, noting the reason when it is not.
func (p *publisher) alive() bool {
	if p.ch == nil || p.closed {
		return false
	}
	select {
	case reason := <-p.closes:
		p.noteClosed(reason)
		return false
	default:
	}
	if p.ch.IsClosed() {
		p.closed = true
		return false
	}
	return true
}

func (p *publisher) noteClosed(reason *amqp.Error) {
	p.closed = true
	if reason != nil {
		p.reason = reason
	}
}

// closedError returns nil while the channel is open, else why it closed.
func (p *publisher) closedError() error {
	if p.alive() {
		return nil
	}
	return p.closeReason(amqp.ErrClosed)
}

// closeReason returns the broker's reason for closing the channel when it is
// known, else err.
func (p *publisher) closeReason(err error) error {
	if !p.closed {
		p.alive()
	}
	if p.reason != nil {
		return p.reason
	}
	return err
}

// drainReturns discards returns that are waiting. The client closes the
// listener when the channel closes.
func (p *publisher) drainReturns() {
	for {
		select {
		case _, ok := <-p.returns:
			if !ok {
				return
			}
		default:
			return
		}
	}
}

// takeReturns matches the waiting returns to the published messages: by
// message id, and among messages with the same id in publish order, which is
// the order the broker returns them in. The result is index-aligned with
// msgs.
func (p *publisher) takeReturns(msgs []*relayer.Message, confirms []*amqp.DeferredConfirmation) []error {
	var byID map[string][]int
	var out []error
	for {
		var ret amqp.Return
		var ok bool
		select {
		case ret, ok = <-p.returns:
		default:
		}
		if !ok {
			return out
		}
		if byID == nil {
			byID = make(map[string][]int)
			for i, m := range msgs {
				if confirms[i] != nil {
					id := m.ID.String()
					byID[id] = append(byID[id], i)
				}
			}
			out = make([]error, len(msgs))
		}
		if idx := byID[ret.MessageId]; len(idx) > 0 {
			out[idx[0]] = &ReturnError{
				Exchange:   ret.Exchange,
				RoutingKey: ret.RoutingKey,
				Code:       ret.ReplyCode,
				Text:       ret.ReplyText,
			}
			byID[ret.MessageId] = idx[1:]
		}
	}
}

// ready makes sure p has an open channel, replacing one that closed.
func (t *Transport) ready(p *publisher) error {
	if p.ch != nil && p.alive() {
		return nil
	}
	t.discard(p)
	return p.open(t.conn, t.maxBatch)
}
