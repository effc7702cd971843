package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/relayer-go/relayer/console"
)

// forHost sends req as if to host: the Host header a browser sends is the
// name of the site whose page asks, whatever address that name resolved to.
func (c *client) forHost(host string, req *http.Request) (int, string, http.Header) {
	c.t.Helper()
	req.Host = host
	return c.do(req)
}

// A DNS rebinding attack: a page of rebind.attacker.example, whose name
// now resolves to 127.0.0.1, reads the dead letters with their CSRF token
// and posts a purge with it, from its own origin (same-origin as far as
// the browser can tell). The console answers neither.
func TestDNSRebindingIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := newClient(t, f.console(t, console.Options{}), "")
	port := c.srv.URL[strings.LastIndex(c.srv.URL, ":")+1:]
	attacker := "rebind.attacker.example:" + port
	token := c.csrf("dead") // what the page would have read, had it worked

	req, _ := http.NewRequest("GET", c.base+"dead", nil)
	status, body, _ := c.forHost(attacker, req)
	if status != http.StatusMisdirectedRequest {
		t.Errorf("GET /dead for %s: %d, want 421", attacker, status)
	}
	if strings.Contains(body, token) || strings.Contains(body, f.Dead[0].ID.String()) {
		t.Errorf("GET /dead for %s serves the page, its CSRF token and dead letters", attacker)
	}
	form := url.Values{"csrf": {token}, "op": {"purge"}, "all": {"1"}}
	req, _ = http.NewRequest("POST", c.base+"dead", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Origin", "http://"+attacker)
	if status, _, _ := c.forHost(attacker, req); status != http.StatusMisdirectedRequest {
		t.Errorf("POST purge for %s: %d, want 421", attacker, status)
	}
	if n, _ := f.st.CountDead(context.Background()); n != 4 {
		t.Errorf("%d dead letters left, want all 4", n)
	}

	// The loopback names are accepted by default, with any port.
	for _, host := range []string{"localhost:" + port, "LOCALHOST", "127.0.0.1:" + port, "[::1]:" + port, "[::1]", "127.0.0.1"} {
		req, _ := http.NewRequest("GET", c.base+"dead", nil)
		if status, _, _ := c.forHost(host, req); status != http.StatusOK {
			t.Errorf("GET /dead for %s: %d, want 200", host, status)
		}
	}
	for _, host := range []string{"localhost.attacker.example", "127.0.0.1.attacker.example", "10.0.0.5:" + port} {
		req, _ := http.NewRequest("GET", c.base, nil)
		if status, _, _ := c.forHost(host, req); status != http.StatusMisdirectedRequest {
			t.Errorf("GET / for %q: %d, want 421", host, status)
		}
	}
}

// Options.AllowedHosts adds names: any port for a bare name, one port for
// a name with a port. The check comes before the token's.
func TestAllowedHostsAreAccepted(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := f.console(t, console.Options{Token: "s3cret", AllowedHosts: []string{"Ops.Example.com", "proxy.example:8443", "10.0.0.5", "[2001:db8::1]"}})
	c := newClient(t, h, "/ops")
	for host, want := range map[string]int{
		"ops.example.com":         http.StatusOK,
		"OPS.EXAMPLE.COM.:9000":   http.StatusOK,
		"proxy.example:8443":      http.StatusOK,
		"proxy.example":           http.StatusMisdirectedRequest,
		"proxy.example:8444":      http.StatusMisdirectedRequest,
		"10.0.0.5:8080":           http.StatusOK,
		"[2001:db8::1]:8080":      http.StatusOK,
		"[2001:db8:0::1]":         http.StatusOK,
		"rebind.attacker.example": http.StatusMisdirectedRequest,
	} {
		req, _ := http.NewRequest("GET", c.base+"dead", nil)
		req.Header.Set("Authorization", "Bearer s3cret")
		if status, _, _ := c.forHost(host, req); status != want {
			t.Errorf("GET /dead for %s: %d, want %d", host, status, want)
		}
	}
	req, _ := http.NewRequest("GET", c.base+"dead?token=s3cret", nil)
	if status, _, hdr := c.forHost("rebind.attacker.example", req); status != http.StatusMisdirectedRequest || hdr.Get("Set-Cookie") != "" {
		t.Errorf("?token= for another host: %d, Set-Cookie %q", status, hdr.Get("Set-Cookie"))
	}
}
