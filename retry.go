package relayer

import (
	"errors"
	"fmt"
	"time"
)

// Retry limits and defaults.
const (
	// RetryMaxAttemptsDefault is how many failed sends a message may have
	// before it is taken out of delivery, unless configured otherwise.
	RetryMaxAttemptsDefault = 10
	// RetryMaxAttemptsMax bounds Retry.MaxAttempts.
	RetryMaxAttemptsMax = 1000
	// RetryBackoffDefault is the wait after a first failed send.
	RetryBackoffDefault = time.Second
	// RetryMaxBackoffDefault bounds the wait between two sends of a message.
	RetryMaxBackoffDefault = 5 * time.Minute
	// RetryBackoffMax bounds Retry.Backoff and Retry.MaxBackoff.
	RetryBackoffMax = 24 * time.Hour
)

// ErrInvalidRetry is returned for a [Retry] field out of range.
var ErrInvalidRetry = errors.New("relayer: invalid retry policy")

// Retry is how dispatchers retry a message whose send failed for a reason of
// its own (any failure but [ErrUnavailable], which pauses the destination and
// costs the message nothing). Each such failure spends one attempt and makes
// the message wait, on the database's clock, before it is sent again: Backoff
// after the first failure, twice as long after each further one, up to
// MaxBackoff, each wait shortened by a random part of up to a fifth so that
// messages that failed together do not come back together. A message that
// fails MaxAttempts times, or fails with [ErrPermanent], is taken out of
// delivery: an unordered message moves to the dead letters, an ordered one is
// parked with its key (see the dispatch package).
//
// A zero field means the enclosing policy's value: a route's policy falls back
// to its outbox's, and the outbox's to the defaults.
type Retry struct {
	// MaxAttempts is how many failed sends a message may have, 1 to
	// RetryMaxAttemptsMax; 1 takes a message out of delivery at its first
	// failure. Default: 10.
	MaxAttempts int
	// Backoff is the wait after the first failed send, 1ms to 24h.
	// Default: 1s.
	Backoff time.Duration
	// MaxBackoff bounds every wait, from Backoff to 24h. Default: 5m.
	MaxBackoff time.Duration
}

// Validate reports the first field out of range.
func (r Retry) Validate() error {
	switch {
	case r.MaxAttempts < 0 || r.MaxAttempts > RetryMaxAttemptsMax:
		return fmt.Errorf("%w: MaxAttempts must be 1 to %d, got %d", ErrInvalidRetry, RetryMaxAttemptsMax, r.MaxAttempts)
	case r.Backoff < 0 || r.Backoff > 0 && r.Backoff < time.Millisecond || r.Backoff > RetryBackoffMax:
		return fmt.Errorf("%w: Backoff must be 1ms to %s, got %s", ErrInvalidRetry, RetryBackoffMax, r.Backoff)
	case r.MaxBackoff < 0 || r.MaxBackoff > RetryBackoffMax:
		return fmt.Errorf("%w: MaxBackoff must be at most %s, got %s", ErrInvalidRetry, RetryBackoffMax, r.MaxBackoff)
	case r.MaxBackoff > 0 && r.Backoff > 0 && r.MaxBackoff < r.Backoff:
		return fmt.Errorf("%w: MaxBackoff (%s) is less than Backoff (%s)", ErrInvalidRetry, r.MaxBackoff, r.Backoff)
	}
	return nil
}

// Or returns r with each zero field taken from fallback.
func (r Retry) Or(fallback Retry) Retry {
	if r.MaxAttempts == 0 {
		r.MaxAttempts = fallback.MaxAttempts
	}
	if r.Backoff == 0 {
		r.Backoff = fallback.Backoff
	}
	if r.MaxBackoff == 0 {
		r.MaxBackoff = fallback.MaxBackoff
	}
	return r
}

// WithDefaults returns r with each zero field set to its default. A
// MaxBackoff below the resulting Backoff is raised to it.
func (r Retry) WithDefaults() Retry {
	r = r.Or(Retry{MaxAttempts: RetryMaxAttemptsDefault, Backoff: RetryBackoffDefault, MaxBackoff: RetryMaxBackoffDefault})
	r.MaxBackoff = max(r.MaxBackoff, r.Backoff)
	return r
}

// Delay returns the wait before the next send of a message that has failed
// attempts times (attempts >= 1), before jitter: Backoff doubled attempts-1
// times, at most MaxBackoff. Call it on a policy with defaults applied.
func (r Retry) Delay(attempts int) time.Duration {
	d := r.Backoff
	for i := 1; i < attempts && d < r.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, r.MaxBackoff)
}

// Exhausted reports whether a message that has failed attempts times may not
// be sent again.
func (r Retry) Exhausted(attempts int) bool { return attempts >= r.MaxAttempts }
