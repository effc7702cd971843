package tests

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

// goBlock is one Go code block of a Markdown file.
type goBlock struct {
	line int // of the opening fence
	code string
}

// goBlocks returns the Go code blocks of the Markdown file at path.
func goBlocks(t *testing.T, path string) []goBlock {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []goBlock
	var cur *goBlock
	var b strings.Builder
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &goBlock{line: n}
			b.Reset()
		case cur != nil && strings.TrimSpace(line) == "```":
			cur.code = b.String()
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			b.WriteString(line + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return blocks
}

var hasMain = regexp.MustCompile(`(?m)^func main\(\)`)

// Every Go block of the README that is a whole file (it starts with its
// imports or its package clause) compiles as pasted into a main package:
// the examples cannot drift from the API. Blocks of a line or two that show
// one call are not built.
func TestReadmeCompiles(t *testing.T) {
	blocks := goBlocks(t, filepath.Join("..", "README.md"))
	built := 0
	for _, blk := range blocks {
		code := strings.TrimSpace(blk.code)
		if !strings.HasPrefix(code, "import") && !strings.HasPrefix(code, "package") {
			continue
		}
		built++
		t.Run(fmt.Sprintf("line%d", blk.line), func(t *testing.T) {
			if !strings.HasPrefix(code, "package") {
				code = "package main\n\n" + code
			}
			if !hasMain.MatchString(code) {
				code += "\n\nfunc main() {}\n"
			}
			// A directory inside this module, so that the workspace's
			// modules and this module's requirements resolve its imports.
			dir, err := os.MkdirTemp(".", "readme-block-")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(code), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("go", "vet", "./"+filepath.Base(dir))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("the README's Go block at line %d does not compile as pasted:\n%s", blk.line, out)
			}
		})
	}
	if built < 2 {
		t.Errorf("built %d of the README's Go blocks, want the quick start and the pgx example at least", built)
	}
}

// The quick start runs, and runs again: a reader who pastes it and runs it
// twice writes two orders and publishes two messages, on a fresh NATS
// server and in a schema of the test's own for the business table (the
// outbox is in the quick start's "messaging" schema).
func TestReadmeQuickStartRunsTwice(t *testing.T) {
	blocks := goBlocks(t, filepath.Join("..", "README.md"))
	code := strings.TrimSpace(blocks[0].code)
	if !strings.Contains(code, "func run(ctx context.Context, js jetstream.JetStream) error") {
		t.Fatalf("the README's first Go block is not the quick start:\n%s", code)
	}
	natsURL := startNATS(t)
	dbURL, err := url.Parse(testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := dbURL.Query()
	q.Set("search_path", testdb.NewSchema(t))
	dbURL.RawQuery = q.Encode()

	dir, err := os.MkdirTemp(".", "readme-quickstart-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	harness := `package main

import (
	"context"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	ctx := context.Background()
	nc, err := nats.Connect(os.Getenv("QUICKSTART_NATS_URL"))
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		panic(err)
	}
	for i := 1; i <= 2; i++ {
		if err := run(ctx, js); err != nil {
			fmt.Fprintf(os.Stderr, "run %d: %v\n", i, err)
			os.Exit(1)
		}
	}
	info, err := js.Stream(ctx, "ORDERS")
	if err != nil {
		panic(err)
	}
	fmt.Println("stored", info.CachedInfo().State.Msgs)
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\n"+code+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "harness.go"), []byte(harness), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "./"+filepath.Base(dir))
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL.String(), "QUICKSTART_NATS_URL="+natsURL)
	out, err := cmd.CombinedOutput()
	// At least the two orders' messages: the "messaging" outbox may hold
	// rows an interrupted earlier run left, which recovery delivers too.
	m := regexp.MustCompile(`stored (\d+)`).FindSubmatch(out)
	if err != nil || m == nil || string(m[1]) < "2" && len(m[1]) == 1 {
		t.Errorf("the quick start, run twice: %v\n%s", err, out)
	}
}

// The "With pgx only" example runs, and runs again: each run writes an
// order of its own and publishes its message, in a schema of the test's
// own (the outbox and the business table both), through the in-memory
// transport.
func TestReadmePgxExampleRunsTwice(t *testing.T) {
	var code string
	for _, blk := range goBlocks(t, filepath.Join("..", "README.md")) {
		if strings.Contains(blk.code, "func run(ctx context.Context, outbox relayer.Outbox) error") {
			code = strings.TrimSpace(blk.code)
		}
	}
	if code == "" {
		t.Fatal("the README has no Go block with the pgx example's run(ctx, outbox)")
	}
	schema := testdb.NewSchema(t)
	dbURL, err := url.Parse(testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := dbURL.Query()
	q.Set("search_path", schema)
	dbURL.RawQuery = q.Encode()

	dir, err := os.MkdirTemp(".", "readme-pgx-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	harness := `package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/transport/memory"
)

func main() {
	ctx := context.Background()
	var routes relayer.Routes
	if err := relayer.AddType[OrderPlaced](&routes, relayer.Route{Transport: "broker", Destination: "orders.placed"}); err != nil {
		panic(err)
	}
	broker := memory.New()
	outbox := relayer.Outbox{Schema: os.Getenv("PGX_EXAMPLE_SCHEMA"), Routes: &routes, Transports: map[string]relayer.Transport{"broker": broker}}
	for i := 1; i <= 2; i++ {
		if err := run(ctx, outbox); err != nil {
			fmt.Fprintf(os.Stderr, "run %d: %v\n", i, err)
			os.Exit(1)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := broker.WaitFor(wctx, 2); err != nil {
		fmt.Fprintf(os.Stderr, "waiting for 2 messages: %v (%d sent)\n", err, len(broker.All()))
		os.Exit(1)
	}
	bodies := map[string]bool{}
	for _, m := range broker.All() {
		bodies[string(m.Body)] = true
	}
	fmt.Println("distinct", len(bodies))
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\n"+code+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "harness.go"), []byte(harness), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "./"+filepath.Base(dir))
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL.String(), "PGX_EXAMPLE_SCHEMA="+schema)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "distinct 2") {
		t.Errorf("the pgx example, run twice: %v\n%s", err, out)
	}
}
