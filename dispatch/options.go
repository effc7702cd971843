package dispatch

import (
	"fmt"
	"log/slog"
	"time"
)

// option is one field of a worker's options, described once: the key
// LoadRunnerOptions reads it under, the range a value set to it must be in,
// and the default its zero value stands for. Each options type lists its
// fields in options(); reading, checking and defaulting them all follow
// from that list.
type option struct {
	key string
	// Exactly one of n, d, owner and logger is set.
	n      *int
	d      *time.Duration
	owner  *string       // describes the instance; default: host name and pid
	logger **slog.Logger // not read from a Source; default: slog.Default()
	// min and max bound a value set to the field (nonzero); max 0 means no
	// upper bound. def replaces zero; 0 means none.
	min, max, def int64
}

func intOption(key string, p *int, min, max, def int) option {
	return option{key: key, n: p, min: int64(min), max: int64(max), def: int64(def)}
}

func durationOption(key string, p *time.Duration, min, max, def time.Duration) option {
	return option{key: key, d: p, min: int64(min), max: int64(max), def: int64(def)}
}

func ownerOption(key string, p *string) option { return option{key: key, owner: p} }

func loggerOption(p **slog.Logger) option { return option{logger: p} }

// loadOptions reads each option's key from l.
func loadOptions(l *loader, opts []option) {
	for _, o := range opts {
		switch {
		case o.n != nil:
			l.int(o.key, o.n)
		case o.d != nil:
			l.duration(o.key, o.d)
		case o.owner != nil:
			l.string(o.key, o.owner)
		}
	}
}

// checkOptions reports the first option set to a value out of its range.
func checkOptions(opts []option) error {
	for _, o := range opts {
		var v int64
		show := func(x int64) string { return fmt.Sprint(x) }
		switch {
		case o.n != nil:
			v = int64(*o.n)
		case o.d != nil:
			v = int64(*o.d)
			show = func(x int64) string { return time.Duration(x).String() }
		default:
			continue
		}
		switch {
		case v == 0, v >= o.min && (o.max == 0 || v <= o.max):
		case o.max == 0:
			return fmt.Errorf("%w: %s must be at least %s, got %s", ErrInvalidOptions, o.key, show(o.min), show(v))
		default:
			return fmt.Errorf("%w: %s must be %s to %s, got %s", ErrInvalidOptions, o.key, show(o.min), show(o.max), show(v))
		}
	}
	return nil
}

// withDefaults returns o with each zero option that has a default set to
// it.
func withDefaults[T any, P interface {
	*T
	options() []option
}](o T) T {
	defaultOptions(P(&o).options())
	return o
}

// defaultOptions sets each zero option that has a default to it.
func defaultOptions(opts []option) {
	for _, o := range opts {
		switch {
		case o.owner != nil:
			*o.owner = ownerOrDefault(*o.owner)
		case o.logger != nil:
			setDefault(o.logger, slog.Default())
		case o.def == 0:
		case o.n != nil:
			setDefault(o.n, int(o.def))
		case o.d != nil:
			setDefault(o.d, time.Duration(o.def))
		}
	}
}
