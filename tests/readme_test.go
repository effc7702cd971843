package tests

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
