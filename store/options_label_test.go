package store_test

import (
	"testing"

	"github.com/relayer-go/relayer/store"
)

// The outbox's label names its outbox table, defaults applied; the wake-up
// channel is built on it.
func TestOptionsLabel(t *testing.T) {
	for _, c := range []struct {
		opts store.Tables
		want string
	}{
		{store.Tables{}, store.SchemaDefault + ".outbox"},
		{store.Tables{Schema: "messaging", TablePrefix: "ob_"}, "messaging.ob_outbox"},
	} {
		if got := c.opts.Label(); got != c.want {
			t.Errorf("%+v.Label() = %q, want %q", c.opts, got, c.want)
		}
		if got := c.opts.WakeChannel(); got != "relayer."+c.want {
			t.Errorf("%+v.WakeChannel() = %q, want relayer.%s", c.opts, got, c.want)
		}
	}
}
