package console_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"sync"
)

func newJar() http.CookieJar {
	jar, _ := cookiejar.New(nil)
	return jar
}

// syncWriter serializes writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
