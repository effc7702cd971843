package proccpu

import (
	"testing"
	"time"
)

// CPU spent spinning shows in Self within seconds.
func TestSelfCountsWork(t *testing.T) {
	before := Self()
	if before == 0 {
		t.Skip("this system's CPU accounting is not read")
	}
	for start := time.Now(); Self()-before < 20*time.Millisecond; {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("Self moved by %s in 10 s of spinning, want at least 20ms", Self()-before)
		}
	}
}
