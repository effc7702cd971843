package store_test

import (
	"testing"

	"github.com/relayer-go/relayer/store"
)

// Lease names are built and read back in one place: what LaneLeaseName and
// MemberLeaseName write, LeaseRow.Lane and Member read, and nothing else
// passes for either.
func TestLeaseNamesReadBack(t *testing.T) {
	for _, lane := range []int{0, 7, 255} {
		if got, ok := (store.LeaseRow{Name: store.LaneLeaseName(lane)}).Lane(); !ok || got != lane {
			t.Errorf("Lane() of %q = %d, %t; want %d, true", store.LaneLeaseName(lane), got, ok, lane)
		}
	}
	if got, ok := (store.LeaseRow{Name: store.MemberLeaseName("host-1/42")}).Member(); !ok || got != "host-1/42" {
		t.Errorf("Member() = %q, %t; want host-1/42, true", got, ok)
	}
	for _, name := range []string{"recovery", "cleanup", "lane:", "lane:x", "lane:-1", "lane:+3", "lane:03", "lanes:3", store.MemberLeaseName("w")} {
		if lane, ok := (store.LeaseRow{Name: name}).Lane(); ok {
			t.Errorf("Lane() of %q = %d, true; want false", name, lane)
		}
	}
	for _, name := range []string{"recovery", store.LaneLeaseName(3), "members:w"} {
		if id, ok := (store.LeaseRow{Name: name}).Member(); ok {
			t.Errorf("Member() of %q = %q, true; want false", name, id)
		}
	}
}

// The outbox's label names its outbox table, defaults applied; the wake-up
// channel is built on it.
func TestOptionsLabel(t *testing.T) {
	for _, c := range []struct {
		opts store.Options
		want string
	}{
		{store.Options{}, store.SchemaDefault + ".outbox"},
		{store.Options{Schema: "messaging", TablePrefix: "ob_"}, "messaging.ob_outbox"},
	} {
		if got := c.opts.Label(); got != c.want {
			t.Errorf("%+v.Label() = %q, want %q", c.opts, got, c.want)
		}
		if got := c.opts.WakeChannel(); got != "relayer."+c.want {
			t.Errorf("%+v.WakeChannel() = %q, want relayer.%s", c.opts, got, c.want)
		}
	}
}
