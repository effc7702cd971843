package console

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// hostPort is a host name or IP address, normalized by hostKey, and a port
// ("" for any).
type hostPort struct{ host, port string }

// hostSet is the host names a console answers to, besides the loopback
// ones.
type hostSet map[hostPort]bool

// parseAllowedHosts checks and normalizes the entries of
// [Options.AllowedHosts].
func parseAllowedHosts(entries []string) (hostSet, error) {
	set := hostSet{}
	for _, e := range entries {
		hp, err := parseAllowedHost(e)
		if err != nil {
			return nil, fmt.Errorf("%w: AllowedHosts: %q: %v", ErrInvalidOptions, e, err)
		}
		set[hp] = true
	}
	return set, nil
}

func parseAllowedHost(e string) (hostPort, error) {
	switch {
	case e == "":
		return hostPort{}, fmt.Errorf("empty")
	case strings.ContainsAny(e, "/@*?#%\\ \t\r\n"):
		return hostPort{}, fmt.Errorf(`want a host name or IP address, with a port or not, such as "ops.example.com" or "10.0.0.5:8080" (no scheme, path or wildcard)`)
	}
	host, port := splitHost(e)
	if host == "" {
		return hostPort{}, fmt.Errorf("no host name")
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return hostPort{}, fmt.Errorf("port %q: want 1 to 65535", port)
		}
	}
	return hostPort{hostKey(host), port}, nil
}

// splitHost splits a Host header or an AllowedHosts entry into its host
// and its port, which is "" when there is none: "ops.example.com:8080",
// "[::1]:8080", "[::1]", "::1" and "10.0.0.5" all read as one would expect.
func splitHost(s string) (host, port string) {
	if h, p, err := net.SplitHostPort(s); err == nil {
		return h, p
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		return s[1 : len(s)-1], ""
	}
	return s, ""
}

// hostKey normalizes a host for comparison: names without case or a
// final dot, IP addresses in their canonical form.
func hostKey(host string) string {
	if ip := net.ParseIP(host); ip != nil {
		return ip.String()
	}
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// loopbackHost reports whether host (normalized) names the loopback
// interface: "localhost" or a loopback IP address. A page of another site
// cannot make a browser send such a name: the browser sends the name of
// the page's own site, whatever address that name resolves to.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// allows reports whether a request's Host header names this console.
func (s hostSet) allows(header string) bool {
	host, port := splitHost(header)
	if host == "" {
		return false
	}
	host = hostKey(host)
	return loopbackHost(host) || s[hostPort{host, ""}] || (port != "" && s[hostPort{host, port}])
}

// checkHost answers 421 Misdirected Request to a request for another host
// name than the console's, before anything else (token, page or action):
// that is how a DNS rebinding attack shows, a page of another site whose
// name now resolves to the console's address.
func (c *Console) checkHost(w http.ResponseWriter, r *http.Request) bool {
	if c.hosts.allows(r.Host) {
		return true
	}
	host := r.Host
	if len(host) > 256 {
		host = host[:256] + "…"
	}
	c.opts.Logger.Warn("console: refused a request for another host name", slog.String("host", host),
		slog.String("remote", r.RemoteAddr), slog.String("method", r.Method), slog.String("path", r.URL.Path))
	http.Error(w, "421 misdirected request: this console does not answer to this host name "+
		"(its operator can allow it: relayer console --allowed-host, or console.Options.AllowedHosts)", http.StatusMisdirectedRequest)
	return false
}
