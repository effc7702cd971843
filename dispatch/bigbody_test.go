package dispatch_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit"
)

// blob is a message whose body is its bytes.
type blob []byte

func (blob) MessageType() string { return "blob" }

// rawBytes is a Serializer that takes blobs as they are.
type rawBytes struct{}

func (rawBytes) ContentType() string             { return "application/octet-stream" }
func (rawBytes) Marshal(v any) ([]byte, error)   { return []byte(v.(blob)), nil }
func (rawBytes) Unmarshal(b []byte, v any) error { *(v.(*blob)) = b; return nil }

// discard is a transport that drops what it is sent, counting it.
type discard struct {
	relayer.Transport
	n atomic.Int64
}

func (d *discard) Send(ctx context.Context, m *relayer.Message) error { d.n.Add(1); return nil }
func (d *discard) SendBatch(ctx context.Context, ms []*relayer.Message) error {
	d.n.Add(int64(len(ms)))
	return nil
}

// peakHeap samples the heap in use while f runs and returns its peak above
// the heap in use before.
func peakHeap(f func()) uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	base := m.HeapInuse
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	f()
	close(done)
	wg.Wait()
	if p := peak.Load(); p > base {
		return p - base
	}
	return 0
}

// A large body is held a bounded number of times: publishing holds the
// caller's body and two more copies at the peak (pgx's encoded parameter and
// the Bind message it writes); delivery on pgx two (pgx's read buffer and the
// message's body, which is the driver's value, kept uncopied). The bound is
// in heap in use; the process's resident memory adds what the garbage
// collector lets grow between collections (GOGC).
func TestLargeBodyMemory(t *testing.T) {
	b := setup(t, dispatch.DirectOptions{})
	var routes relayer.Routes
	must(t, routes.Add("blob", relayer.Route{Transport: "mem", Destination: "blobs"}))
	outbox := b.outbox
	outbox.Routes = &routes
	outbox.Serializer = rawBytes{}
	tr := &discard{Transport: b.mem}
	outbox.Transports = map[string]relayer.Transport{"mem": tr}
	w, err := enlist.NewWriter(outbox, enlist.Options{})
	must(t, err)
	const size = 32 << 20
	body := make(blob, size)
	for i := range body {
		body[i] = byte(i)
	}
	pub := peakHeap(func() {
		must(t, w.RunInTx(context.Background(), b.db, nil, func(tx *enlist.Tx) error {
			return tx.PublishAll(context.Background(), relayer.NewOutgoing(body))
		}))
	})
	body = nil
	r, err := dispatch.NewRecovery(b.db, outbox, dispatch.RecoveryOptions{MinAge: time.Nanosecond, PollInterval: 20 * time.Millisecond, Logger: b.logger()})
	must(t, err)
	del := peakHeap(func() {
		must(t, r.Start(context.Background()))
		testkit.Eventually(t, 10*time.Second, func() bool { return tr.n.Load() == 1 }, "the body sent")
		r.Stop(context.Background())
	})
	t.Logf("publish: peak heap %d MB over the body's %d MB; delivery: %d MB", pub>>20, size>>20, del>>20)
	if pub > size*5/2 {
		t.Errorf("publishing a %d MB body took %d MB of heap besides it, over 2.5 times the body", size>>20, pub>>20)
	}
	if del > size*5/2 {
		t.Errorf("delivering a %d MB body took %d MB of heap, over 2.5 times the body", size>>20, del>>20)
	}
}
