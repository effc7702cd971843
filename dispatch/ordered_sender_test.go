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

// One lane's sends share a goroutine: a send that panics reports it and the
// next send runs; a send that outlives its hand-off time is handed off,
// counted slow meanwhile, and its result reaches the channel handed off.
func TestLaneSenderRunsSendsInTurnAndHandsOffALateOne(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	release := make(chan struct{})
	var sent []string
	tr := sendFunc(func(ctx context.Context, m *relayer.Message) error {
		switch m.Type {
		case "panic":
			panic("boom")
		case "hang":
			<-release
			return errors.New("late")
		}
		sent = append(sent, m.Type)
		return nil
	})
	aside := newSetAside()
	e := endpoint{"x", "d"}
	var s laneSender
	defer s.close()
	far := time.Now().Add(time.Hour)
	for _, typ := range []string{"a", "panic", "b"} {
		w := aside.follow(e)
		done, err := s.send(ctx, ctx, tr, &relayer.Message{Type: typ}, w, far, far)
		w.end(completed, nil)
		if done != nil {
			t.Fatalf("%s: handed off", typ)
		}
		if typ == "panic" {
			if err == nil || !strings.Contains(err.Error(), "transport panicked: boom") {
				t.Errorf("panicking send: %v", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", typ, err)
		}
	}
	if strings.Join(sent, ",") != "a,b" {
		t.Errorf("sent %v, want a and b", sent)
	}
	w := aside.follow(e)
	now := time.Now()
	done, err := s.send(ctx, ctx, tr, &relayer.Message{Type: "hang"}, w, now.Add(10*time.Millisecond), now.Add(50*time.Millisecond))
	if !errors.Is(err, errHandedOff) || done == nil {
		t.Fatalf("late send = %v, %v; want handed off", done, err)
	}
	if !aside.skipped(e) {
		t.Error("the endpoint of a send past its slow time is not set aside")
	}
	s.close()
	close(release)
	select {
	case err := <-done:
		if err == nil || err.Error() != "late" {
			t.Errorf("handed-off send's result = %v, want late", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handed-off send's result never arrived")
	}
	w.end(completed, nil)
	if aside.skipped(e) {
		t.Error("the endpoint stays set aside after its send ended")
	}
}
