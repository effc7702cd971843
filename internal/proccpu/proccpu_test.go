package proccpu

import "testing"

// CPU spent spinning shows in Self.
func TestSelfCountsWork(t *testing.T) {
	before := Self()
	if before == 0 {
		t.Skip("this system's CPU accounting is not read")
	}
	spins := 0
	for Self()-before < 20_000_000 { // 20 ms
		spins++
	}
	if spins == 0 {
		t.Fatal("Self counted 20 ms before any work")
	}
}
