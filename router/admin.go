package router

import (
	"crypto/subtle"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
)

// adminGuard protects /admin/*, /status, /dashboard and /debug/pprof/. A
// request passes with the admin bearer token, on the admin listener
// (admin.listen), or from a peer in admin.allow_cidrs; the last two are
// trust by network position, so they also refuse what a browser sends on
// behalf of another site (browserOrigin).
type adminGuard struct {
	token    []byte
	prefixes []netip.Prefix
}

func parseCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, fmt.Errorf("invalid CIDR %q", s)
	}
	return p.Masked(), nil
}

func newAdminGuard(c Admin) (*adminGuard, error) {
	g := &adminGuard{}
	tok, err := AdminToken(c)
	if err != nil {
		return nil, err
	}
	g.token = []byte(tok)
	for _, s := range c.AllowCIDRs {
		p, err := parseCIDR(s)
		if err != nil {
			return nil, fmt.Errorf("admin.allow_cidrs: %w", err)
		}
		g.prefixes = append(g.prefixes, p)
	}
	return g, nil
}

// AdminToken reads the admin token from the variable admin.token_env
// names: "" when it is unset or empty (no request passes by token), an
// error naming the variable when its value is a placeholder or shorter
// than minAdminToken bytes. serve, reload and check-config all refuse such
// a token.
func AdminToken(c Admin) (string, error) {
	if c.TokenEnv == "" {
		return "", nil
	}
	tok := strings.TrimSpace(os.Getenv(c.TokenEnv))
	if tok == "" {
		return "", nil
	}
	if why := weakToken(tok); why != "" {
		return "", fmt.Errorf("admin.token_env: environment variable %s %s; set it to a random secret of at least %d bytes, e.g. $(openssl rand -hex 32)", c.TokenEnv, why, minAdminToken)
	}
	return tok, nil
}

// minAdminToken is the shortest admin token accepted: 16 random bytes are
// beyond guessing; a human-chosen word of that length at least is not a
// default.
const minAdminToken = 16

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
	if len(tok) < minAdminToken {
		return fmt.Sprintf("holds a token of %d bytes, shorter than %d", len(tok), minAdminToken)
	}
	return ""
}

// hasToken reports whether the request carries the admin bearer token.
func (a *adminGuard) hasToken(ctx *fasthttp.RequestCtx) bool {
	if len(a.token) == 0 {
		return false
	}
	return subtle.ConstantTimeCompare(bearer(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)), a.token) == 1
}

// allow reports whether the request may use admin endpoints, and writes the
// error when it may not.
func (a *adminGuard) allow(ctx *fasthttp.RequestCtx, writeError func(*fasthttp.RequestCtx, *adapters.APIError)) bool {
	if a.hasToken(ctx) {
		return true
	}
	if onAdminListener(ctx) {
		return true // the listener checked Host and Origin
	}
	if a.peerAllowed(ctx) {
		if e := browserOrigin(ctx); e != nil {
			writeError(ctx, e)
			return false
		}
		return true
	}
	writeError(ctx, &adapters.APIError{Status: 403, Type: adapters.TypePermission, Code: "admin_forbidden",
		Message: "admin endpoints need the admin bearer token (Authorization: Bearer <admin.token_env>) or the admin listener (admin.listen)"})
	return false
}

func (a *adminGuard) peerAllowed(ctx *fasthttp.RequestCtx) bool {
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

// adminListenerKey marks a request that came in on the admin listener.
type adminListenerKey struct{}

func onAdminListener(ctx *fasthttp.RequestCtx) bool {
	return ctx.UserValue(adminListenerKey{}) != nil
}

// handleAdminListener serves the admin listener: every route of the main
// listener, each request trusted as if it carried the admin token, once
// browserOrigin has passed it. Framing and trailers are refused first, so
// that browserOrigin reads no trailer field.
func (g *Gateway) handleAdminListener(ctx *fasthttp.RequestCtx) {
	if g.refuseFraming(ctx) {
		return
	}
	if e := browserOrigin(ctx); e != nil {
		g.refuse(ctx, requestID(ctx), refusedOrigin, e)
		return
	}
	ctx.SetUserValue(adminListenerKey{}, true)
	g.handle(ctx)
}

// browserOrigin refuses what a web page could make a browser send to a
// listener trusted by network position: a Host that is a DNS name (DNS
// rebinding: evil.example resolving to 127.0.0.1), an Origin other than
// the Host itself, or a fetch the browser marks cross-site (CSRF). Tools
// (curl, SDKs, frontdoor warm) send none of these.
func browserOrigin(ctx *fasthttp.RequestCtx) *adapters.APIError {
	host := string(ctx.Host())
	if host != "" && !localHost(host) {
		return &adapters.APIError{Status: 403, Type: adapters.TypePermission, Code: "admin_host_forbidden",
			Message: "admin without a token answers only to an IP address or localhost in Host (got " + strconv.Quote(host) + "): use http://<ip>:<port>/"}
	}
	if o := ctx.Request.Header.Peek("Origin"); len(o) > 0 {
		u, err := url.Parse(string(o))
		if err != nil || u.Host != host {
			return &adapters.APIError{Status: 403, Type: adapters.TypePermission, Code: "admin_cross_origin",
				Message: "admin without a token refuses requests from another origin (" + strconv.Quote(string(o)) + ")"}
		}
	}
	switch string(ctx.Request.Header.Peek("Sec-Fetch-Site")) {
	case "cross-site", "same-site":
		return &adapters.APIError{Status: 403, Type: adapters.TypePermission, Code: "admin_cross_origin",
			Message: "admin without a token refuses requests a browser sends for another site"}
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
