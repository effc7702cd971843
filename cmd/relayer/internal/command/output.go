package command

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// NewJSONEncoder returns an encoder for the command's --json output. Each
// value is written as a line of JSON in which every rune a terminal would
// act on rather than print (bidirectional overrides such as U+202E, other
// format and control characters) is a \u escape, as OneLine escapes them in
// the text output: a type, key or error read from the outbox cannot reorder
// or hide what `jq -r` prints. Decoded, the strings are unchanged.
func NewJSONEncoder(w io.Writer) *json.Encoder {
	return json.NewEncoder(escapingWriter{w})
}

// escapingWriter writes encoded JSON with its non-printing runes escaped.
// json.Encoder writes each value in one call, and outside strings JSON is
// ASCII, so every such rune is inside a string, whole, in one write.
type escapingWriter struct{ w io.Writer }

func (e escapingWriter) Write(p []byte) (int, error) {
	clean := true
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRune(p[i:])
		if r >= utf8.RuneSelf && !unicode.IsPrint(r) {
			clean = false
			break
		}
		i += size
	}
	if clean {
		return e.w.Write(p)
	}
	out := make([]byte, 0, len(p)+32)
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRune(p[i:])
		switch {
		case r >= utf8.RuneSelf && !unicode.IsPrint(r) && r <= 0xFFFF:
			out = fmt.Appendf(out, `\u%04x`, r)
		case r >= utf8.RuneSelf && !unicode.IsPrint(r):
			hi, lo := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, hi, lo)
		default:
			out = append(out, p[i:i+size]...)
		}
		i += size
	}
	if _, err := e.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// IsTerminal reports whether w is a character device, such as a terminal.
// golang.org/x/term is not a dependency of the module, and the file mode is
// enough to choose between a redrawn bar and plain lines.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
