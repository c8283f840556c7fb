package router

import (
	"crypto/subtle"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
)

// adminGuard protects /admin/*, /status and /dashboard: a client from an
// allowed CIDR, or one with the admin bearer token, may pass.
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
	if c.TokenEnv != "" {
		g.token = []byte(strings.TrimSpace(os.Getenv(c.TokenEnv)))
	}
	for _, s := range c.AllowCIDRs {
		p, err := parseCIDR(s)
		if err != nil {
			return nil, fmt.Errorf("admin.allow_cidrs: %w", err)
		}
		g.prefixes = append(g.prefixes, p)
	}
	return g, nil
}

// allow reports whether the request may use admin endpoints, and writes the
// error when it may not.
func (a *adminGuard) allow(ctx *fasthttp.RequestCtx, writeError func(*fasthttp.RequestCtx, *adapters.APIError)) bool {
	if len(a.token) > 0 {
		auth := ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)
		if tok, ok := strings.CutPrefix(string(auth), "Bearer "); ok && subtle.ConstantTimeCompare([]byte(tok), a.token) == 1 {
			return true
		}
	}
	if addr, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(addr.IP); ok {
			ip = ip.Unmap()
			for _, p := range a.prefixes {
				if p.Contains(ip) {
					return true
				}
			}
		}
	}
	writeError(ctx, &adapters.APIError{Status: 403, Type: adapters.TypePermission, Code: "admin_forbidden",
		Message: "admin endpoints need the admin bearer token or a client address in admin.allow_cidrs"})
	return false
}
