package relayer_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/relayer-go/relayer"
)

func TestRetryDelayDoublesUpToTheBound(t *testing.T) {
	p := relayer.Retry{Backoff: time.Second, MaxBackoff: 5 * time.Second}.WithDefaults()
	var got []time.Duration
	for a := 1; a <= 5; a++ {
		got = append(got, p.Delay(a))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays = %v, want %v", got, want)
		}
	}
	if p.MaxAttempts != relayer.RetryMaxAttemptsDefault || p.Exhausted(9) || !p.Exhausted(10) {
		t.Errorf("MaxAttempts = %d, Exhausted(9) = %v, Exhausted(10) = %v", p.MaxAttempts, p.Exhausted(9), p.Exhausted(10))
	}
	// A huge attempt count neither overflows nor loops long.
	if d := (relayer.Retry{}).WithDefaults().Delay(1 << 30); d != relayer.RetryMaxBackoffDefault {
		t.Errorf("Delay(1<<30) = %s", d)
	}
}

func TestRetryFieldsFallBack(t *testing.T) {
	route := relayer.Retry{MaxAttempts: 3}
	outbox := relayer.Retry{Backoff: 10 * time.Millisecond, MaxAttempts: 7}
	got := route.Or(outbox).WithDefaults()
	want := relayer.Retry{MaxAttempts: 3, Backoff: 10 * time.Millisecond, MaxBackoff: relayer.RetryMaxBackoffDefault}
	if got != want {
		t.Errorf("merged = %+v, want %+v", got, want)
	}
	// A Backoff above the default bound raises the bound to it.
	if got := (relayer.Retry{Backoff: time.Hour}).WithDefaults(); got.MaxBackoff != time.Hour {
		t.Errorf("MaxBackoff = %s, want the Backoff", got.MaxBackoff)
	}
}

func TestRetryValidate(t *testing.T) {
	for _, bad := range []relayer.Retry{
		{MaxAttempts: -1},
		{MaxAttempts: relayer.RetryMaxAttemptsMax + 1},
		{Backoff: time.Microsecond},
		{Backoff: 25 * time.Hour},
		{MaxBackoff: -time.Second},
		{Backoff: time.Minute, MaxBackoff: time.Second},
	} {
		if err := bad.Validate(); !errors.Is(err, relayer.ErrInvalidRetry) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidRetry", bad, err)
		}
	}
	if err := (relayer.Retry{}).Validate(); err != nil {
		t.Errorf("zero policy: %v", err)
	}
}

// Outbox.Validate names what writers and workers cannot use, under one
// sentinel and the field's own.
func TestOutboxValidate(t *testing.T) {
	if err := (relayer.Outbox{}).Validate(); err != nil {
		t.Errorf("the zero outbox: %v, want valid", err)
	}
	for _, c := range []struct {
		name   string
		outbox relayer.Outbox
		also   error
		field  string
	}{
		{"lanes", relayer.Outbox{Lanes: relayer.LanesMax + 1}, relayer.ErrInvalidLanes, "Lanes"},
		{"nil transport", relayer.Outbox{Transports: map[string]relayer.Transport{"nats": nil}}, relayer.ErrInvalidOutbox, `Transports["nats"]`},
		{"retry", relayer.Outbox{Retry: relayer.Retry{MaxAttempts: -1}}, relayer.ErrInvalidRetry, "MaxAttempts"},
	} {
		err := c.outbox.Validate()
		if !errors.Is(err, relayer.ErrInvalidOutbox) || !errors.Is(err, c.also) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: Validate = %v, want ErrInvalidOutbox and %v naming %s", c.name, err, c.also, c.field)
		}
	}
}

// WithDefaults fills the zero fields that have defaults and keeps the others.
func TestOutboxWithDefaults(t *testing.T) {
	d := relayer.Outbox{Schema: "s"}.WithDefaults()
	if d.Schema != "s" || d.Lanes != relayer.LanesDefault || d.Serializer == nil || d.Retry != (relayer.Retry{}).WithDefaults() {
		t.Errorf("WithDefaults = %+v", d)
	}
	if d := (relayer.Outbox{Lanes: 8, Retry: relayer.Retry{MaxAttempts: 3}}).WithDefaults(); d.Lanes != 8 || d.Retry.MaxAttempts != 3 {
		t.Errorf("WithDefaults changed set fields: %+v", d)
	}
}
