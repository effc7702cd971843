package command

import (
	"net"
	"net/http"
	"strings"
	"time"
)

// ServerShutdown bounds the wait for requests in flight at a stop.
const ServerShutdown = 5 * time.Second

// HostList is --allowed-host: repeatable, and each value a comma-separated
// list.
type HostList []string

// String returns the names joined by commas.
func (h *HostList) String() string { return strings.Join(*h, ",") }

// Set adds each name of a comma-separated list.
func (h *HostList) Set(s string) error {
	for _, name := range strings.Split(s, ",") {
		if name = strings.TrimSpace(name); name != "" {
			*h = append(*h, name)
		}
	}
	return nil
}

// AllowedHosts returns the host names a server (the console, the relay's
// endpoints) answers to besides the
// loopback ones: listen's host, unless it is a wildcard or loopback, and
// the names given.
func AllowedHosts(listen string, given []string) []string {
	var hosts []string
	if host, _, err := net.SplitHostPort(listen); err == nil && host != "" && !Loopback(host) {
		if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
			hosts = append(hosts, host)
		}
	}
	return append(hosts, given...)
}

// Loopback reports whether host (an IP or a name) is the loopback
// interface; "" and unspecified addresses (all interfaces) are not.
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// The servers' timeouts: a request's headers and its body (a console
// request's body is a small form) must arrive within ServerReadTimeout, so
// that slow clients cannot hold its connections; an idle keep-alive
// connection is closed after ServerIdleTimeout.
const (
	ServerReadTimeout = 10 * time.Second // a request's headers and body
	ServerIdleTimeout = 2 * time.Minute  // an idle keep-alive connection
)

// NewServer returns the HTTP server of the console or of the relay's
// endpoints for h, with timeouts that keep slow clients from holding its
// connections.
func NewServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: ServerReadTimeout, ReadTimeout: ServerReadTimeout, IdleTimeout: ServerIdleTimeout}
}
