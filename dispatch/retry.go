package dispatch

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/store"
)

// retries holds the retry policy of each routed message type, the outbox's
// policy merged under the route's, and the outbox's own for types without a
// route here (rows written by another version of the service).
type retries struct {
	byType map[string]relayer.Retry
	def    relayer.Retry
}

// newRetries builds the retry policies of a validated outbox.
func newRetries(outbox relayer.Outbox) *retries {
	r := &retries{byType: map[string]relayer.Retry{}, def: outbox.Retry.WithDefaults()}
	if outbox.Routes != nil {
		for typ, route := range outbox.Routes.All() {
			r.byType[typ] = route.Retry.Or(outbox.Retry).WithDefaults()
		}
	}
	return r
}

func (r *retries) of(msgType string) relayer.Retry {
	if p, ok := r.byType[msgType]; ok {
		return p
	}
	return r.def
}

// verdict is what becomes of a message whose send failed.
type verdict struct {
	// attempts is the message's failed sends, this one included.
	attempts int
	// retryAt is when it may be sent again, on the database's clock; zero
	// when it must not be (reason is set) or the failure cost nothing.
	retryAt time.Time
	// reason is set when the message leaves delivery: a store.Reason*.
	reason string
}

// judge decides the fate of message m, which had failed prior times, after a
// send that failed with err. A destination that was unavailable costs
// nothing: the message keeps its attempts and is eligible at once (its
// destination is paused instead). A permanent failure ends delivery at once;
// any other spends an attempt and waits for the policy's backoff, or ends
// delivery when the attempts are exhausted. now is the database's time.
func (r *retries) judge(m *relayer.Message, prior int, err error, now time.Time) verdict {
	if errors.Is(err, relayer.ErrUnavailable) {
		return verdict{attempts: prior}
	}
	v := verdict{attempts: prior + 1}
	p := r.of(m.Type)
	switch {
	case errors.Is(err, relayer.ErrPermanent):
		v.reason = store.ReasonPermanent
	case p.Exhausted(v.attempts):
		v.reason = store.ReasonExhausted
	default:
		v.retryAt = now.Add(jittered(p.Delay(v.attempts)))
	}
	return v
}

// jittered shortens d by a random part of up to a fifth, so that messages
// that failed together are not sent again together.
func jittered(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

// LoadRetry reads a retry policy, for relayer.Outbox.Retry or a route's, from
// a configuration source: MaxAttempts, Backoff and MaxBackoff. Missing keys
// stay zero (the enclosing policy's value).
func LoadRetry(src Source) (relayer.Retry, error) {
	var r relayer.Retry
	l := loader{src: src}
	l.int("MaxAttempts", &r.MaxAttempts)
	l.duration("Backoff", &r.Backoff)
	l.duration("MaxBackoff", &r.MaxBackoff)
	if l.err != nil {
		return relayer.Retry{}, l.err
	}
	if err := r.Validate(); err != nil {
		return relayer.Retry{}, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return r, nil
}
