package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	relayernats "github.com/relayer-go/relayer/transport/nats"
)

// sentMsg is a committed message as the checker expects it.
type sentMsg struct {
	id   uuid.UUID
	kind int
	path int
	due  time.Time
	at   time.Time // commit returned
}

// recvMsg is the first reception of a message.
type recvMsg struct {
	at   time.Time
	kind int
}

// tracker matches what was committed with what the consumer received.
type tracker struct {
	written   atomic.Int64
	delivered atomic.Int64 // distinct ids received

	mu         sync.Mutex
	sent       map[uuid.UUID]sentMsg
	recv       map[uuid.UUID]recvMsg
	dups       int
	badHeaders int
	lastSeq    map[string]int
	outOfOrder int
	disorder   string // the first out-of-order arrival
}

func (t *tracker) init() {
	t.sent = make(map[uuid.UUID]sentMsg)
	t.recv = make(map[uuid.UUID]recvMsg)
	t.lastSeq = make(map[string]int)
}

func (t *tracker) committed(at time.Time, msgs []sentMsg) {
	t.mu.Lock()
	for _, m := range msgs {
		m.at = at
		t.sent[m.id] = m
	}
	t.mu.Unlock()
	t.written.Add(int64(len(msgs)))
}

func (t *tracker) received(m jetstream.Msg, subjects [kindCount]string) {
	at := time.Now()
	id, err := relayernats.MessageID(m.Headers())
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.badHeaders++
		return
	}
	if _, seen := t.recv[id]; seen {
		t.dups++
		return
	}
	kind := slices.Index(subjects[:], m.Subject())
	t.recv[id] = recvMsg{at: at, kind: kind}
	t.delivered.Add(1)
	if kind != kindActivity {
		return
	}
	var ev CustomerActivity
	if err := json.Unmarshal(m.Data(), &ev); err != nil {
		t.badHeaders++
		return
	}
	if want := t.lastSeq[ev.Customer] + 1; ev.Seq != want {
		t.outOfOrder++
		if t.disorder == "" {
			t.disorder = fmt.Sprintf("%s: got seq %d, want %d", ev.Customer, ev.Seq, want)
		}
	}
	t.lastSeq[ev.Customer] = ev.Seq
}

// summary is what the run observed.
type summary struct {
	written, delivered       [len(demoPaths)]int
	kindWritten, kindDeliv   [kindCount]int
	total, got               int
	missing, unexpected      int
	dups, bad, outOfOrder    int
	disorder                 string
	customers                int
	elapsed                  time.Duration
	immediate                int
	immediateSpan            time.Duration
	latP50, latP99, schedP50 time.Duration
	invoices                 invoices
}

func (s summary) ok() bool {
	return s.missing == 0 && s.outOfOrder == 0 && s.unexpected == 0 && s.bad == 0 && s.effectsOnce()
}

// effectsOnce reports whether the billing service wrote one invoice per
// order placed, and no more.
func (s summary) effectsOnce() bool {
	return s.invoices.rows == s.kindWritten[kindPlaced] && s.invoices.orders == s.invoices.rows
}

func (s summary) problem() string {
	var p []string
	if s.missing > 0 {
		p = append(p, fmt.Sprintf("%d messages missing", s.missing))
	}
	if s.outOfOrder > 0 {
		p = append(p, fmt.Sprintf("%d ordered messages out of order (first: %s)", s.outOfOrder, s.disorder))
	}
	if s.unexpected > 0 {
		p = append(p, fmt.Sprintf("%d unexpected messages", s.unexpected))
	}
	if s.bad > 0 {
		p = append(p, fmt.Sprintf("%d unreadable messages", s.bad))
	}
	if !s.effectsOnce() {
		p = append(p, fmt.Sprintf("%d invoices for %d distinct orders, %d orders placed", s.invoices.rows, s.invoices.orders, s.kindWritten[kindPlaced]))
	}
	return strings.Join(p, "; ")
}

func (t *tracker) summarize(start time.Time, elapsed time.Duration) summary {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := summary{dups: t.dups, bad: t.badHeaders, outOfOrder: t.outOfOrder, disorder: t.disorder,
		customers: len(t.lastSeq), elapsed: elapsed, total: len(t.sent)}
	var lat, sched []time.Duration
	var lastImmediate time.Time
	for id, m := range t.sent {
		s.written[m.path]++
		s.kindWritten[m.kind]++
		r, ok := t.recv[id]
		if !ok {
			s.missing++
			continue
		}
		s.got++
		s.delivered[m.path]++
		s.kindDeliv[m.kind]++
		if m.due.IsZero() {
			lat = append(lat, max(0, r.at.Sub(m.at)))
			s.immediate++
			if r.at.After(lastImmediate) {
				lastImmediate = r.at
			}
		} else {
			sched = append(sched, max(0, r.at.Sub(m.due)))
		}
	}
	for id := range t.recv {
		if _, ok := t.sent[id]; !ok {
			s.unexpected++
		}
	}
	if !lastImmediate.IsZero() {
		s.immediateSpan = lastImmediate.Sub(start)
	}
	s.latP50, s.latP99 = percentile(lat, 50), percentile(lat, 99)
	s.schedP50 = percentile(sched, 50)
	return s
}

// percentile returns the p-th percentile (nearest rank) of ds, sorting it.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := (len(ds)*p + 99) / 100
	return ds[max(0, min(len(ds)-1, i-1))]
}

// deliveredBy counts the sends each dispatcher reported.
type deliveredBy struct{ direct, ordered, recovery uint64 }

func (d *demo) printSummary(s summary, by deliveredBy, runErr error) {
	w := d.stdout
	fmt.Fprintln(w)
	fmt.Fprintln(w, "summary")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  entry point\twritten\tdelivered")
	for i, p := range demoPaths {
		fmt.Fprintf(tw, "  %s\t%d\t%d\n", p, s.written[i], s.delivered[i])
	}
	fmt.Fprintf(tw, "  total\t%d\t%d\n", s.total, s.got)
	tw.Flush()
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  route\twritten\tdelivered")
	for k := range kindCount {
		fmt.Fprintf(tw, "  %s\t%d\t%d\n", kindNames[k], s.kindWritten[k], s.kindDeliv[k])
	}
	tw.Flush()
	order := "verified"
	if s.outOfOrder > 0 {
		order = fmt.Sprintf("VIOLATED %d times (first: %s)", s.outOfOrder, s.disorder)
	}
	fmt.Fprintf(w, "sent by: direct %d, ordered workers %d, recovery %d\n", by.direct, by.ordered, by.recovery)
	fmt.Fprintf(w, "per-key order: %s over %d customers\n", order, s.customers)
	fmt.Fprintf(w, "duplicates seen: %d\n", s.dups)
	effects := "verified"
	if !s.effectsOnce() {
		effects = "VIOLATED"
	}
	fmt.Fprintf(w, "exactly-once effects: %s: %d invoices for %d orders placed, written by %d billing consumers through the inbox (%d redeliveries skipped)\n",
		effects, s.invoices.rows, s.kindWritten[kindPlaced], demoBillingInstances, s.invoices.skipped)
	if s.immediate > 0 && s.immediateSpan > 0 {
		fmt.Fprintf(w, "throughput: %.0f msg/s (%d immediate messages written and delivered in %s)\n",
			float64(s.immediate)/s.immediateSpan.Seconds(), s.immediate, s.immediateSpan.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "commit-to-broker latency: p50 %s, p99 %s\n", roundLatency(s.latP50), roundLatency(s.latP99))
	if s.kindDeliv[kindReminder] > 0 {
		fmt.Fprintf(w, "scheduled messages arrived p50 %s after they were due\n", roundLatency(s.schedP50))
	}
	fmt.Fprintf(w, "elapsed: %s\n", s.elapsed.Round(time.Millisecond))
	switch {
	case runErr != nil && !s.ok():
		fmt.Fprintf(w, "result: FAILED: %v; %s\n", runErr, s.problem())
	case runErr != nil:
		fmt.Fprintf(w, "result: FAILED: %v\n", runErr)
	case !s.ok():
		fmt.Fprintf(w, "result: FAILED: %s\n", s.problem())
	default:
		fmt.Fprintf(w, "result: OK, all %d messages delivered\n", s.total)
	}
}

func roundLatency(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}
