package workerstore_test

import (
	"testing"

	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// Lease names are built and read back in one place: what LaneLeaseName and
// MemberLeaseName write, LeaseRow.Lane and Member read, and nothing else
// passes for either.
func TestLeaseNamesReadBack(t *testing.T) {
	for _, lane := range []int{0, 7, 255} {
		if got, ok := (store.LeaseRow{Name: workerstore.LaneLeaseName(lane)}).Lane(); !ok || got != lane {
			t.Errorf("Lane() of %q = %d, %t; want %d, true", workerstore.LaneLeaseName(lane), got, ok, lane)
		}
	}
	if got, ok := (store.LeaseRow{Name: workerstore.MemberLeaseName("host-1/42")}).Member(); !ok || got != "host-1/42" {
		t.Errorf("Member() = %q, %t; want host-1/42, true", got, ok)
	}
	for _, name := range []string{"recovery", "cleanup", "lane:", "lane:x", "lane:-1", "lane:+3", "lane:03", "lanes:3", workerstore.MemberLeaseName("w")} {
		if lane, ok := (store.LeaseRow{Name: name}).Lane(); ok {
			t.Errorf("Lane() of %q = %d, true; want false", name, lane)
		}
	}
	for _, name := range []string{"recovery", workerstore.LaneLeaseName(3), "members:w"} {
		if id, ok := (store.LeaseRow{Name: name}).Member(); ok {
			t.Errorf("Member() of %q = %q, true; want false", name, id)
		}
	}
}
