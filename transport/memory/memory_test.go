package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/transport/memory"
)

func msg(dest string, body string) *relayer.Message {
	return &relayer.Message{ID: uuid.New(), Destination: dest, Body: []byte(body)}
}

func TestRecordsPerDestinationAndFailsSelectively(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr := memory.New()
	if err := tr.Send(ctx, msg("a", "1")); err != nil {
		t.Fatal(err)
	}
	bad := errors.New("rejected")
	tr.FailWith(func(m *relayer.Message) error {
		if string(m.Body) == "3" {
			return bad
		}
		return nil
	})
	err := tr.SendBatch(ctx, []*relayer.Message{msg("b", "2"), msg("b", "3"), msg("b", "4")})
	var be *relayer.BatchError
	if !errors.As(err, &be) || be.Failed(0) || !be.Failed(1) || be.Failed(2) || !errors.Is(err, bad) {
		t.Errorf("partial failure = %v", err)
	}
	if got := tr.Messages("b"); len(got) != 2 || string(got[0].Body) != "2" || string(got[1].Body) != "4" {
		t.Errorf("b received %v", got)
	}
	if err := tr.SendBatch(ctx, []*relayer.Message{msg("a", "5"), msg("b", "6")}); err == nil {
		t.Error("a batch mixing destinations was accepted")
	}
	if tr.Len() != 3 || tr.Sends() != 3 {
		t.Errorf("Len %d Sends %d, want 3 and 3", tr.Len(), tr.Sends())
	}
	caps, _ := tr.Capabilities(ctx, "a")
	if !caps.OrderedByKey || caps.MaxBatchSize != memory.DefaultMaxBatchSize {
		t.Errorf("default capabilities %+v", caps)
	}
}

func TestBlockHonoursOrIgnoresCancellation(t *testing.T) {
	t.Parallel()
	tr := memory.New()
	release := tr.Block(false)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := tr.Send(ctx, msg("a", "1")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("blocked send with a deadline = %v", err)
	}
	release()

	release = tr.Block(true)
	done := make(chan error, 1)
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() { done <- tr.Send(ctx2, msg("a", "2")) }()
	cancel2()
	select {
	case err := <-done:
		t.Fatalf("a send ignoring cancellation returned early: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	<-done
	wctx, wcancel := context.WithTimeout(context.Background(), time.Second)
	defer wcancel()
	if err := tr.WaitFor(wctx, 0); err != nil {
		t.Error(err)
	}
}
