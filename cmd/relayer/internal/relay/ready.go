package relay

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"

	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/store"
)

// relayState is what /readyz reports.
type relayState struct {
	db     *sql.DB
	store  *store.Store
	runner *dispatch.Runner
	listen bool
	// transports are the relay's, whose connections and paused
	// destinations the readiness reports (see transportChecks).
	transports []openedTransport

	mu       sync.Mutex
	started  bool
	stopping bool
}

func (s *relayState) setStarted() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started = true
}

func (s *relayState) setStopping() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
}

// endpointConns is the size of the endpoints' pool.
const endpointConns = 2

// readinessTimeout bounds the database checks of one /readyz.
const readinessTimeout = 2 * time.Second

// check is one line of /readyz's answer.
type check struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Detail says why a check failed, or what it found.
	Detail string `json:"detail,omitempty"`
	// Paused lists a transport's paused destinations.
	Paused []pausedDestination `json:"paused,omitempty"`
}

// ready runs the readiness checks, in order, and reports whether all
// passed.
func (s *relayState) ready(ctx context.Context) (bool, []check) {
	s.mu.Lock()
	started, stopping := s.started, s.stopping
	s.mu.Unlock()
	var checks []check
	add := func(name string, ok bool, detail string) { checks = append(checks, check{name, ok, detail, nil}) }
	switch {
	case stopping:
		add("workers", false, "stopping")
	case !started:
		add("workers", false, "starting")
	default:
		add("workers", true, "started")
	}
	ctx, cancel := context.WithTimeout(ctx, readinessTimeout)
	defer cancel()
	if err := s.db.PingContext(ctx); err != nil {
		add("database", false, err.Error())
	} else {
		add("database", true, "")
		if _, err := s.store.CheckSchema(ctx); err != nil && !errors.Is(err, store.ErrSchemaNewer) {
			add("schema", false, err.Error())
		} else {
			add("schema", true, "")
		}
	}
	if s.listen {
		if s.runner.Stats().Listening {
			add("listener", true, "subscribed")
		} else {
			add("listener", false, "not subscribed: the workers poll until it reconnects")
		}
	}
	checks = append(checks, transportChecks(s.transports, s.runner.Paused())...)
	for _, c := range checks {
		if !c.OK {
			return false, checks
		}
	}
	return true, checks
}
