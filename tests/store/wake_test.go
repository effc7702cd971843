package store_test

import (
	"strings"
	"testing"

	"github.com/relayer-go/relayer/store"
)

func TestWakeChannel(t *testing.T) {
	long := strings.Repeat("s", store.SchemaMaxLen)
	for _, tc := range []struct {
		opts store.Tables
		want string
	}{
		{store.Tables{}, "relayer." + store.SchemaDefault + ".outbox"},
		{store.Tables{Schema: "billing", TablePrefix: "eu_"}, "relayer.billing.eu_outbox"},
	} {
		if got := tc.opts.WakeChannel(); got != tc.want {
			t.Errorf("%+v: channel %q, want %q", tc.opts, got, tc.want)
		}
	}
	a := store.Tables{Schema: long, TablePrefix: "a_"}.WakeChannel()
	b := store.Tables{Schema: long, TablePrefix: "b_"}.WakeChannel()
	if len(a) != 63 || len(b) != 63 || a == b {
		t.Errorf("long names give channels %q and %q: want two different ones of 63 bytes", a, b)
	}
	if got := (store.Tables{Schema: "billing"}).NotifySQL(); got != `NOTIFY "relayer.billing.outbox"` {
		t.Errorf("NotifySQL = %s", got)
	}
}
