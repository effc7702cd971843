package dispatch

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/relayer-go/relayer"
)

// sendFunc is a transport whose Send runs a function.
type sendFunc func(ctx context.Context, m *relayer.Message) error

func (f sendFunc) Send(ctx context.Context, m *relayer.Message) error { return f(ctx, m) }
func (f sendFunc) SendBatch(ctx context.Context, ms []*relayer.Message) error {
	for _, m := range ms {
		if err := f(ctx, m); err != nil {
			return err
		}
	}
	return nil
}
func (f sendFunc) Capabilities(context.Context, string) (relayer.Capabilities, error) {
	return relayer.Capabilities{OrderedByKey: true, MaxBatchSize: 1}, nil
}

// A lane's sends run in turn on its goroutine: a send that panics reports
// it and the next send runs, and the batch's wait returns when the lanes
// have finished, with their errors.
func TestLaneRunsRunSendsInTurn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var sent []string
	tr := sendFunc(func(ctx context.Context, m *relayer.Message) error {
		if m.Type == "panic" {
			panic("boom")
		}
		sent = append(sent, m.Type)
		return nil
	})
	aside := newSetAside()
	e := endpoint{"x", "d"}
	far := time.Now().Add(time.Hour)
	fs := newLaneRuns(2)
	errs := make([]error, 2)
	var panicked error
	fs.start(0, func(f *laneRun) error {
		for i, typ := range []string{"a", "panic", "b"} {
			w := aside.follow(e)
			err := f.send(ctx, ctx, tr, &relayer.Message{Type: typ}, i, e, w, time.Now(), far, far)
			w.end(completed, nil)
			if typ == "panic" {
				panicked = err
			} else if err != nil {
				return err
			}
		}
		return nil
	}, func(err error) { errs[0] = err })
	fs.start(1, func(*laneRun) error { return errors.New("lane 1 failed") }, func(err error) { errs[1] = err })
	fs.wait(ctx, func() time.Duration { return time.Hour }, func(int, *laneRun) { t.Error("a send was handed off") })
	if panicked == nil || !strings.Contains(panicked.Error(), "transport panicked: boom") {
		t.Errorf("panicking send: %v", panicked)
	}
	if strings.Join(sent, ",") != "a,b" {
		t.Errorf("sent %v, want a and b", sent)
	}
	if errs[0] != nil || errs[1] == nil || errs[1].Error() != "lane 1 failed" {
		t.Errorf("lanes' errors = %v", errs)
	}
}

// A send past its slow time sets its endpoint aside while the batch waits;
// at its hand-off time the batch hands it off and returns while the
// transport still runs it, the lane touches nothing more, and the
// transport's result reaches the keeper's channel.
func TestLaneRunsHandOffALateSend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	release := make(chan struct{})
	tr := sendFunc(func(ctx context.Context, m *relayer.Message) error {
		<-release
		return errors.New("late")
	})
	aside := newSetAside()
	e := endpoint{"x", "d"}
	fs := newLaneRuns(1)
	ran := make(chan error, 1)
	w := aside.follow(e)
	fs.start(0, func(f *laneRun) error {
		now := time.Now()
		err := f.send(ctx, ctx, tr, &relayer.Message{Type: "hang"}, 3, e, w, now, now.Add(20*time.Millisecond), now.Add(200*time.Millisecond))
		ran <- err
		return err
	}, func(error) { t.Error("a lane handed off counted as finished") })
	setAside := make(chan bool, 1)
	go func() {
		time.Sleep(100 * time.Millisecond) // past the slow time, before the hand-off
		setAside <- aside.skipped(e)
	}()
	var handed *laneRun
	fs.wait(ctx, func() time.Duration { return 20 * time.Millisecond }, func(i int, f *laneRun) {
		if i != 0 || f.row != 3 || f.e != e {
			t.Errorf("handed off lane %d row %d to %v", i, f.row, f.e)
		}
		handed = f
	})
	if handed == nil || ctx.Err() != nil {
		t.Fatalf("the late send was not handed off at its hand-off time (handed: %v; the batch's context: %v)", handed != nil, ctx.Err())
	}
	if !<-setAside {
		t.Error("the endpoint of a send past its slow time is not set aside")
	}
	close(release)
	select {
	case err := <-handed.handed:
		if err == nil || err.Error() != "late" {
			t.Errorf("handed-off send's result = %v, want late", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handed-off send's result never arrived")
	}
	if err := <-ran; err != errHandedOff {
		t.Errorf("the lane's send returned %v, want errHandedOff", err)
	}
	w.end(completed, nil)
	if aside.skipped(e) {
		t.Error("the endpoint stays set aside after its send ended")
	}
}

// When the batch's context ends, a send in flight is handed off at once and
// a lane between sends begins no more.
func TestLaneRunsStopWithTheBatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	release, hanging, between, next := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	defer close(release)
	tr := sendFunc(func(ctx context.Context, m *relayer.Message) error {
		if m.Type == "hang" {
			close(hanging)
			<-release
		}
		return nil
	})
	aside := newSetAside()
	e := endpoint{"x", "d"}
	far := time.Now().Add(time.Hour)
	fs := newLaneRuns(2)
	var second error
	fs.start(0, func(f *laneRun) error {
		return f.send(ctx, ctx, tr, &relayer.Message{Type: "hang"}, 0, e, aside.follow(e), time.Now(), far, far)
	}, func(error) { t.Error("the hung lane counted as finished") })
	fs.start(1, func(f *laneRun) error {
		if err := f.send(ctx, ctx, tr, &relayer.Message{Type: "quick"}, 0, e, aside.follow(e), time.Now(), far, far); err != nil {
			return err
		}
		close(between)
		<-next
		second = f.send(ctx, ctx, tr, &relayer.Message{Type: "quick"}, 1, e, aside.follow(e), time.Now(), far, far)
		return nil
	}, func(error) {})
	go func() {
		<-between
		<-hanging
		cancel()
		time.Sleep(50 * time.Millisecond) // the batch sees its end meanwhile
		close(next)
	}()
	var handed []int
	fs.wait(ctx, func() time.Duration { return time.Hour }, func(i int, f *laneRun) { handed = append(handed, i) })
	if len(handed) != 1 || handed[0] != 0 {
		t.Errorf("handed off lanes %v, want the hung lane 0", handed)
	}
	if second != errHalted {
		t.Errorf("a send after the batch's end returned %v, want errHalted", second)
	}
}
