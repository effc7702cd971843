package consume

import (
	"fmt"
	"math"
	"time"
)

// Limit is one numeric option of a broker adapter's ConsumeOptions and the
// range it must be in. The adapters check theirs as one table with
// [CheckLimits], so that they refuse what cannot work in the same words.
type Limit struct {
	// Name is the option as the error names it, such as
	// "ConsumeOptions.Concurrency".
	Name string
	// Value is the option's value: a count, or a time.Duration when
	// Duration is set. Min and Max bound it (Max 0: no bound).
	Value, Min, Max int64
	Duration        bool
	// Zero says what 0 stands for, when 0 takes a default outside
	// [Min, Max]; empty when 0 is an ordinary value.
	Zero string
}

// CheckLimits returns an error wrapping invalid (the adapter's
// ErrInvalidOptions) that names the first limit whose value is out of its
// range, or nil.
func CheckLimits(invalid error, limits ...Limit) error {
	for _, l := range limits {
		if l.Value == 0 && l.Zero != "" {
			continue
		}
		upper := l.Max
		if upper == 0 {
			upper = math.MaxInt64
		}
		if l.Value >= l.Min && l.Value <= upper {
			continue
		}
		want := fmt.Sprintf("%s to %s", l.format(l.Min), l.format(upper))
		if upper == math.MaxInt64 {
			want = l.format(l.Min) + " or more"
		}
		if l.Zero != "" {
			want += " (0 for " + l.Zero + ")"
		}
		return fmt.Errorf("%w: %s is %s, want %s", invalid, l.Name, l.format(l.Value), want)
	}
	return nil
}

func (l Limit) format(v int64) string {
	if l.Duration {
		return time.Duration(v).String()
	}
	return fmt.Sprint(v)
}
