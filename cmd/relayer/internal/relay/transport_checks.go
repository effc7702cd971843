package relay

import (
	"fmt"
	"time"

	"github.com/relayer-go/relayer/store"
)

// pausedDestination is a paused destination in a transport's readiness
// check.
type pausedDestination struct {
	Destination string    `json:"destination"`
	Since       time.Time `json:"since"`
	NextProbe   time.Time `json:"next_probe"`
	Error       string    `json:"error,omitempty"`
}

// transportChecks returns one readiness check per transport, named
// "transport:NAME": it fails while the transport's broker connection is
// down or any of its destinations is paused (pauses holds the workers'),
// as the relay cannot deliver everything it is given then.
func transportChecks(open []openedTransport, pauses []store.Pause) []check {
	var out []check
	for _, o := range open {
		c := check{Name: "transport:" + o.name, OK: true, Detail: o.kind + ": connection state not tracked"}
		if o.connection != nil {
			up, state := o.connection()
			c.OK, c.Detail = up, o.kind+": "+state
		}
		for _, p := range pauses {
			if p.Transport == o.name {
				c.Paused = append(c.Paused, pausedDestination{Destination: p.Destination, Since: p.Since.UTC(), NextProbe: p.NextProbe.UTC(), Error: p.LastError})
			}
		}
		if n := len(c.Paused); n > 0 {
			c.OK = false
			c.Detail += fmt.Sprintf("; %d destination(s) paused, the first since %s", n, oldest(c.Paused).Format(time.RFC3339))
		}
		out = append(out, c)
	}
	return out
}

// oldest is the earliest Since of ps, which is not empty.
func oldest(ps []pausedDestination) time.Time {
	t := ps[0].Since
	for _, p := range ps[1:] {
		if p.Since.Before(t) {
			t = p.Since
		}
	}
	return t
}
