package relayergorm

import "testing"

func TestParseSavepoint(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		query string
		op    savepointOp
		name  string
	}{
		{"SAVEPOINT sp123", opSavepoint, "sp123"},
		{"  savepoint\tSp_1 ; ", opSavepoint, "sp_1"},
		{`SAVEPOINT "Mixed ""Case"""`, opSavepoint, `Mixed "Case"`},
		{"ROLLBACK TO SAVEPOINT sp123", opRollbackTo, "sp123"},
		{"rollback to sp123", opRollbackTo, "sp123"},
		{"ROLLBACK WORK TO SAVEPOINT a", opRollbackTo, "a"},
		{"ROLLBACK TRANSACTION\nTO a", opRollbackTo, "a"},
		{"RELEASE SAVEPOINT a", opRelease, "a"},
		{"RELEASE a", opRelease, "a"},
		{"RELEASE savepoint", opRelease, "savepoint"},
		{"ROLLBACK", 0, ""},
		{"ROLLBACK TO", 0, ""},
		{"SAVEPOINT", 0, ""},
		{"SAVEPOINT a b", 0, ""},
		{"SAVEPOINTS a", 0, ""},
		{"INSERT INTO savepoint VALUES (1)", 0, ""},
		{"", 0, ""},
	} {
		op, name, ok := parseSavepoint(c.query)
		if ok != (c.op != 0) || op != c.op || name != c.name {
			t.Errorf("parseSavepoint(%q) = %v, %q, %v; want %v, %q", c.query, op, name, ok, c.op, c.name)
		}
	}
}

func TestWrittenSavepoints(t *testing.T) {
	t.Parallel()
	var m Messages
	m.Record(1)
	var w written
	write := func() int {
		p := w.unwritten([]MessageSource{&m, &m})
		w.wrote(p)
		return len(p.msgs)
	}
	if n := write(); n != 1 {
		t.Fatalf("first write: %d messages, want 1", n)
	}
	w.savepointStatement("SAVEPOINT a")
	m.Record(2)
	if n := write(); n != 1 {
		t.Fatalf("write in a: %d messages, want 1 (the model appears twice, its first message is written)", n)
	}
	w.savepointStatement("SAVEPOINT b")
	m.Record(3)
	write()
	w.savepointStatement("ROLLBACK TO SAVEPOINT a")
	if n := len(w.unwritten([]MessageSource{&m}).msgs); n != 2 {
		t.Fatalf("after rolling back to a: %d messages to write, want 2", n)
	}
	// a is kept after ROLLBACK TO; b is gone.
	write()
	w.savepointStatement("ROLLBACK TO SAVEPOINT a")
	if n := len(w.unwritten([]MessageSource{&m}).msgs); n != 2 {
		t.Fatalf("after rolling back to a again: %d messages to write, want 2", n)
	}
	write()
	w.savepointStatement("RELEASE SAVEPOINT a")
	w.savepointStatement("ROLLBACK TO SAVEPOINT b") // unknown: undo everything
	if n := len(w.unwritten([]MessageSource{&m}).msgs); n != 3 {
		t.Fatalf("after rolling back to an unknown savepoint: %d messages to write, want 3", n)
	}
	write()
	m.Record(4)
	w.committed()
	if p := m.PendingMessages(); len(p) != 1 || p[0].Message != 4 {
		t.Errorf("pending after the commit: %+v, want the message recorded after the last write", p)
	}
}
