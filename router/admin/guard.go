package admin

import (
	"bytes"
	"crypto/subtle"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/internal/reply"
)

// Guard protects /admin/*, /status, /dashboard and /debug/pprof/. A
// request passes with the admin bearer token or a session signed from it
// (the cookie of POST /admin/login), on the admin listener
// (admin.listen), or from a peer in admin.allow_cidrs; the last two are
// trust by network position, so they also refuse what a browser sends on
// behalf of another site (BrowserOrigin).
type Guard struct {
	token    []byte
	prefixes []netip.Prefix
}

// ParseCIDR parses an admin.allow_cidrs entry.
func ParseCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, fmt.Errorf("invalid CIDR %q", s)
	}
	return p.Masked(), nil
}

// NewGuard makes the guard of admin.token_env (the variable's name) and
// admin.allow_cidrs.
func NewGuard(tokenEnv string, allowCIDRs []string) (*Guard, error) {
	g := &Guard{}
	tok, err := Token(tokenEnv)
	if err != nil {
		return nil, err
	}
	g.token = []byte(tok)
	for _, s := range allowCIDRs {
		p, err := ParseCIDR(s)
		if err != nil {
			return nil, fmt.Errorf("admin.allow_cidrs: %w", err)
		}
		g.prefixes = append(g.prefixes, p)
	}
	return g, nil
}

// Token reads the admin token from the variable tokenEnv (admin.token_env)
// names: "" when it is unset or empty (no request passes by token), an
// error naming the variable when its value is a placeholder or weaker than
// minTokenBits (tokenStrength). serve, reload and check-config all refuse
// such a token.
func Token(tokenEnv string) (string, error) {
	if tokenEnv == "" {
		return "", nil
	}
	tok := strings.TrimSpace(os.Getenv(tokenEnv))
	if tok == "" {
		return "", nil
	}
	if why := weakToken(tok); why != "" {
		return "", fmt.Errorf("admin.token_env: environment variable %s %s; generate one with: openssl rand -hex 32", tokenEnv, why)
	}
	return tok, nil
}

// placeholderTokens are values shipped in examples and typed in haste,
// compared lower-case with everything but letters and digits removed;
// templateMarkers mark a template's value wherever they appear in it.
var (
	placeholderTokens = []string{
		"changeme", "replaceme", "changeit", "replace", "secret", "admin", "password", "passwd", "token",
		"admintoken", "adminsecret", "test", "example", "default", "letmein", "frontdoor", "xxx", "todo",
	}
	templateMarkers = []string{"changeme", "replaceme", "changeit", "placeholder", "yourtoken", "yoursecret"}
)

// weakToken says why tok must not be an admin token, or "" when it may.
func weakToken(tok string) string {
	norm := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return -1
	}, tok)
	if slices.Contains(placeholderTokens, norm) || slices.ContainsFunc(templateMarkers, func(m string) bool { return strings.Contains(norm, m) }) {
		return fmt.Sprintf("holds a placeholder (%q)", tok)
	}
	if bits, flaws := tokenStrength(tok); bits < minTokenBits {
		return fmt.Sprintf("holds a weak token: about %.0f bits by frontdoor's estimate (%s), at least %d needed", bits, strings.Join(flaws, ", "), minTokenBits)
	}
	return ""
}

// AdminToken is the admin token, nil when there is none.
func (a *Guard) AdminToken() []byte { return a.token }

// hasToken reports whether the request carries the admin bearer token.
func (a *Guard) hasToken(ctx *fasthttp.RequestCtx) bool {
	if len(a.token) == 0 {
		return false
	}
	return subtle.ConstantTimeCompare(Bearer(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)), a.token) == 1
}

// Allow reports whether the request may use admin endpoints, and writes the
// error when it may not.
func (a *Guard) Allow(ctx *fasthttp.RequestCtx) bool {
	if e := a.check(ctx); e != nil {
		reply.Error(ctx, e)
		return false
	}
	return true
}

// check is Allow's verdict: nil when the request may pass. A session
// cookie (POST /admin/login) passes like the token, behind sessionCSRF.
func (a *Guard) check(ctx *fasthttp.RequestCtx) *adapters.APIError {
	if a.hasToken(ctx) {
		return nil
	}
	if OnListener(ctx) {
		return nil // the listener checked Host and Origin
	}
	if a.hasSession(ctx) {
		if !sessionCSRF(ctx) {
			return errCrossOrigin(string(ctx.Request.Header.Peek("Origin")))
		}
		return nil
	}
	if a.peerAllowed(ctx) {
		return BrowserOrigin(ctx)
	}
	return errForbidden()
}

func (a *Guard) peerAllowed(ctx *fasthttp.RequestCtx) bool {
	if len(a.prefixes) == 0 {
		return false
	}
	addr, ok := ctx.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return false
	}
	ip, ok := netip.AddrFromSlice(addr.IP)
	if !ok {
		return false
	}
	ip = ip.Unmap()
	for _, p := range a.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// listenerKey marks a request that came in on the admin listener.
type listenerKey struct{}

// MarkListener marks a request of the admin listener, which BrowserOrigin
// has passed: it is trusted as if it carried the admin token.
func MarkListener(ctx *fasthttp.RequestCtx) { ctx.SetUserValue(listenerKey{}, true) }

// OnListener reports whether the request came in on the admin listener.
func OnListener(ctx *fasthttp.RequestCtx) bool {
	return ctx.UserValue(listenerKey{}) != nil
}

// BrowserOrigin refuses what a web page could make a browser send to a
// listener trusted by network position: a Host that is a DNS name (DNS
// rebinding: evil.example resolving to 127.0.0.1), an Origin other than
// the Host itself, or a fetch the browser marks cross-site (CSRF). Tools
// (curl, SDKs, frontdoor warm) send none of these.
func BrowserOrigin(ctx *fasthttp.RequestCtx) *adapters.APIError {
	host := string(ctx.Host())
	if host != "" && !localHost(host) {
		return errHostForbidden(host)
	}
	if o := ctx.Request.Header.Peek("Origin"); len(o) > 0 {
		u, err := url.Parse(string(o))
		if err != nil || u.Host != host {
			return errCrossOrigin(string(o))
		}
	}
	switch string(ctx.Request.Header.Peek("Sec-Fetch-Site")) {
	case "cross-site", "same-site":
		return errCrossOrigin("")
	}
	return nil
}

// localHost reports whether a Host header names an IP address or
// localhost, which DNS cannot rebind.
func localHost(hostport string) bool {
	h := hostport
	if sh, _, err := net.SplitHostPort(hostport); err == nil {
		h = sh
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	h = strings.ToLower(h)
	return h == "localhost" || strings.HasSuffix(h, ".localhost")
}

// LoopbackAddr reports whether a listen address (host:port) binds only
// loopback: "localhost", 127.0.0.0/8 or ::1. ":9091" binds every
// interface.
func LoopbackAddr(hostport string) bool {
	h, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.Unmap().IsLoopback()
}

// Bearer is the token of an Authorization: Bearer header value, or nil.
func Bearer(h []byte) []byte {
	const p = "Bearer "
	if len(h) > len(p) && bytes.EqualFold(h[:len(p)], []byte(p)) {
		return h[len(p):]
	}
	return nil
}
