package relayer_test

import (
	"errors"
	"hash/fnv"
	"strings"
	"testing"
	"testing/quick"

	"github.com/relayer-go/relayer"
)

func TestLaneKnownVectors(t *testing.T) {
	t.Parallel()
	// FNV-1a 32-bit reference values.
	for _, c := range []struct {
		key  string
		hash uint32
	}{
		{"", 0x811c9dc5},
		{"a", 0xe40c292c},
		{"foobar", 0xbf9cf968},
	} {
		got, err := relayer.Lane(c.key, relayer.LanesMax)
		if err != nil {
			t.Fatal(err)
		}
		if want := int(c.hash % relayer.LanesMax); got != want {
			t.Errorf("Lane(%q, %d) = %d, want %d", c.key, relayer.LanesMax, got, want)
		}
	}
	if got, _ := relayer.Lane("customer-42", 1); got != 0 {
		t.Errorf("Lane with one lane = %d, want 0", got)
	}
	// Multi-byte keys hash their UTF-8 bytes.
	h := fnv.New32a()
	h.Write([]byte("Kunde-Müller-東京"))
	if got, _ := relayer.Lane("Kunde-Müller-東京", 32); got != int(h.Sum32()%32) {
		t.Errorf("Lane of a UTF-8 key = %d, want %d", got, h.Sum32()%32)
	}
}

func TestLaneMatchesHashFNV(t *testing.T) {
	t.Parallel()
	f := func(key string, lanes uint16) bool {
		n := int(lanes) + 1
		h := fnv.New32a()
		h.Write([]byte(key))
		got, err := relayer.Lane(key, n)
		return err == nil && got == int(h.Sum32()%uint32(n)) && got >= 0 && got < n
	}
	if err := quick.Check(f, nil); err != nil {
		t.Error(err)
	}
}

func TestLaneRejectsBadCounts(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, -1, relayer.LanesMax + 1} {
		if _, err := relayer.Lane("k", n); !errors.Is(err, relayer.ErrInvalidLanes) {
			t.Errorf("Lane(k, %d) = %v, want ErrInvalidLanes", n, err)
		}
	}
}

func TestNewIDIsVersion7AndIncreasing(t *testing.T) {
	t.Parallel()
	prev, _ := relayer.NewID()
	for range 1000 {
		id, err := relayer.NewID()
		if err != nil {
			t.Fatal(err)
		}
		if id.Version() != 7 {
			t.Fatalf("version %d, want 7", id.Version())
		}
		if strings.Compare(id.String(), prev.String()) <= 0 {
			t.Fatalf("id %s does not sort after %s", id, prev)
		}
		prev = id
	}
}

type OrderCreated struct{ ID int }

type named struct{}

func (named) MessageType() string { return "orders.v1.Named" }

type pointerNamed struct{}

func (*pointerNamed) MessageType() string { return "orders.v1.PointerNamed" }

func TestTypeNames(t *testing.T) {
	t.Parallel()
	var nilNamed *named
	for _, c := range []struct {
		got, want string
	}{
		{relayer.TypeOf(OrderCreated{}), "relayer_test.OrderCreated"},
		{relayer.TypeOf(&OrderCreated{}), "relayer_test.OrderCreated"},
		{relayer.TypeOf(named{}), "orders.v1.Named"},
		{relayer.TypeOf(nilNamed), "orders.v1.Named"},
		{relayer.TypeOf(&pointerNamed{}), "orders.v1.PointerNamed"},
		{relayer.TypeOf(pointerNamed{}), "orders.v1.PointerNamed"},
		{relayer.TypeOf(nil), ""},
		{relayer.TypeName[OrderCreated](), "relayer_test.OrderCreated"},
		{relayer.TypeName[*named](), "orders.v1.Named"},
		{relayer.TypeName[pointerNamed](), "orders.v1.PointerNamed"},
		{relayer.TypeName[error](), ""},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	var r relayer.Routes
	if _, err := r.Lookup("x"); !errors.Is(err, relayer.ErrNoRoute) {
		t.Errorf("Lookup on the zero Routes = %v, want ErrNoRoute", err)
	}
	if err := relayer.AddType[OrderCreated](&r, relayer.Route{Transport: "nats", Destination: "orders", Ordered: true}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		typ   string
		route relayer.Route
		field string
	}{
		{"", relayer.Route{Transport: "t", Destination: "d"}, "message type"},
		{"a", relayer.Route{Destination: "d"}, "Transport"},
		{"a", relayer.Route{Transport: "t"}, "Destination"},
		{relayer.TypeName[OrderCreated](), relayer.Route{Transport: "t", Destination: "d"}, "already"},
	} {
		if err := r.Add(c.typ, c.route); !errors.Is(err, relayer.ErrInvalidRoute) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("Add(%q, %+v) = %v, want ErrInvalidRoute naming %s", c.typ, c.route, err, c.field)
		}
	}
	got, err := r.Lookup("relayer_test.OrderCreated")
	if err != nil || got != (relayer.Route{Transport: "nats", Destination: "orders", Ordered: true}) {
		t.Errorf("Lookup = %+v, %v", got, err)
	}
	clone := r.Clone()
	_ = r.Add("other", relayer.Route{Transport: "t", Destination: "d"})
	if clone.Len() != 1 || r.Len() != 2 {
		t.Errorf("clone shares state: clone %d, original %d", clone.Len(), r.Len())
	}
	var types []string
	for typ := range r.All() {
		types = append(types, typ)
	}
	if strings.Join(types, ",") != "other,relayer_test.OrderCreated" {
		t.Errorf("All = %v, want sorted types", types)
	}
}

func TestBatchError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	err := error(&relayer.BatchError{Errs: []error{nil, boom, nil}})
	if !errors.Is(err, boom) {
		t.Error("BatchError does not unwrap to its failures")
	}
	var be *relayer.BatchError
	if !errors.As(err, &be) || be.Failed(0) || !be.Failed(1) || be.Failed(5) {
		t.Error("Failed reports the wrong messages")
	}
	if !strings.Contains(err.Error(), "1 of 3") {
		t.Errorf("message %q does not count failures", err)
	}
}

func TestJSONSerializer(t *testing.T) {
	t.Parallel()
	var s relayer.Serializer = relayer.JSON{}
	b, err := s.Marshal(OrderCreated{ID: 7})
	if err != nil || string(b) != `{"ID":7}` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var out OrderCreated
	if err := s.Unmarshal(b, &out); err != nil || out.ID != 7 || s.ContentType() != "application/json" {
		t.Errorf("Unmarshal = %+v, %v", out, err)
	}
}

// The lane count writers and workers share comes from one place: the
// outbox's Lanes, LanesDefault when zero, refused outside its range.
func TestOutboxLaneCount(t *testing.T) {
	for lanes, want := range map[int]int{0: relayer.LanesDefault, 1: 1, 64: 64, relayer.LanesMax: relayer.LanesMax} {
		if got, err := (relayer.Outbox{Lanes: lanes}).LaneCount(); err != nil || got != want {
			t.Errorf("LaneCount with Lanes %d = %d, %v; want %d", lanes, got, err, want)
		}
	}
	for _, lanes := range []int{-1, relayer.LanesMax + 1} {
		if _, err := (relayer.Outbox{Lanes: lanes}).LaneCount(); !errors.Is(err, relayer.ErrInvalidLanes) {
			t.Errorf("LaneCount with Lanes %d = %v, want ErrInvalidLanes", lanes, err)
		}
	}
}
