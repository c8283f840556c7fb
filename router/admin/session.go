package admin

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/hex"
	"html"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"frontdoor/internal/reply"
)

// A browser cannot send the bearer token, so an operator signs in: POST
// /admin/login with the token sets a session cookie, and the cookie then
// passes the guard like the token. The cookie holds an expiry, a nonce
// and an HMAC-SHA256 of both under a key derived from the admin token,
// never the token: replicas that share the token accept each other's
// sessions, and a new token ends every session.

// SessionTTL is how long a session lasts.
const SessionTTL = 8 * time.Hour

// The session cookie's names: the __Host- prefix (Secure, Path=/, no
// Domain: no other host can set it) when the login came over TLS.
const (
	cookieName       = "frontdoor_admin"
	cookieNameSecure = "__Host-frontdoor_admin"
)

//go:embed login.html
var loginHTML string

// sessionKey is the HMAC key of sessions, derived from the admin token.
func (a *Guard) sessionKey() []byte {
	m := hmac.New(sha256.New, a.token)
	m.Write([]byte("frontdoor admin session v1"))
	return m.Sum(nil)
}

// NewSession returns a session cookie's value valid until expires.
func (a *Guard) NewSession(expires time.Time) string {
	var nonce [12]byte
	_, _ = rand.Read(nonce[:])
	body := strconv.FormatInt(expires.Unix(), 10) + "." + hex.EncodeToString(nonce[:])
	return body + "." + a.sign(body)
}

func (a *Guard) sign(body string) string {
	m := hmac.New(sha256.New, a.sessionKey())
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil))
}

// validSession reports whether v is a session this guard signed that has
// not expired at now.
func (a *Guard) validSession(v string, now time.Time) bool {
	if len(a.token) == 0 || len(v) > 200 {
		return false
	}
	i := strings.LastIndexByte(v, '.')
	if i < 0 {
		return false
	}
	body, mac := v[:i], v[i+1:]
	if subtle.ConstantTimeCompare([]byte(a.sign(body)), []byte(mac)) != 1 {
		return false
	}
	exp, _, _ := strings.Cut(body, ".")
	sec, err := strconv.ParseInt(exp, 10, 64)
	return err == nil && now.Unix() < sec && sec <= now.Add(SessionTTL+time.Minute).Unix()
}

// hasSession reports whether the request carries a valid session cookie.
func (a *Guard) hasSession(ctx *fasthttp.RequestCtx) bool {
	now := time.Now()
	for _, name := range []string{cookieNameSecure, cookieName} {
		if v := ctx.Request.Header.Cookie(name); len(v) > 0 && a.validSession(string(v), now) {
			return true
		}
	}
	return false
}

// sessionCSRF refuses what another page could make a browser send with the
// session cookie: SameSite=Strict keeps the cookie off requests from other
// sites, but a page of the same site (another port, another subdomain)
// still gets it sent. So an Origin, when present, must be the request's
// own; a fetch the browser marks cross-site or same-site is refused; and a
// request that changes state must carry its Origin (every browser sends
// one on a POST or DELETE).
func sessionCSRF(ctx *fasthttp.RequestCtx) bool {
	o := ctx.Request.Header.Peek("Origin")
	if len(o) > 0 {
		u, err := url.Parse(string(o))
		if err != nil || u.Host != string(ctx.Host()) {
			return false
		}
	}
	switch string(ctx.Request.Header.Peek("Sec-Fetch-Site")) {
	case "cross-site", "same-site":
		return false
	}
	return ctx.IsGet() || ctx.IsHead() || len(o) > 0
}

// secure reports whether the browser reached the gateway over TLS: its own
// listener, or a proxy in front that says so (a false claim only makes the
// cookie one the browser will not send back over plain HTTP).
func secure(ctx *fasthttp.RequestCtx) bool {
	return ctx.IsTLS() || strings.EqualFold(string(ctx.Request.Header.Peek("X-Forwarded-Proto")), "https")
}

// maxNextLen bounds the path a login redirects to.
const maxNextLen = 256

// localPath reports whether next (already percent-decoded) may be a
// login's redirect: a path of this gateway, beginning with one "/" and
// made of letters, digits and /_.~-?=& only, with no "//". Nothing a
// browser could read as another origin gets through: no "//" or "/\" (a
// scheme-relative URL), no control character (browsers drop tabs and
// newlines, so "/\t/evil.example" is "//evil.example"), no "%" (no second
// decoding), no "@", ":" or "#".
func localPath(next string) bool {
	if len(next) < 1 || len(next) > maxNextLen || next[0] != '/' || strings.Contains(next, "//") {
		return false
	}
	for i := 0; i < len(next); i++ {
		switch c := next[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("/_.~-?=&", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// serveLogin answers GET /admin/login (the form) and POST /admin/login
// (form field token, or the bearer header): a right token gets the session
// cookie and a redirect to next (the query's or the form's, when
// localPath passes it; /dashboard otherwise); a wrong one a 403.
func (h *Handler) serveLogin(ctx *fasthttp.RequestCtx, guard *Guard) {
	next := string(ctx.QueryArgs().Peek("next"))
	if v := ctx.PostArgs().Peek("next"); len(v) > 0 {
		next = string(v)
	}
	if !localPath(next) {
		next = "/dashboard"
	}
	switch {
	case ctx.IsGet() || ctx.IsHead():
		loginPage(ctx, 200, next, "")
		return
	case !ctx.IsPost():
		reply.OnlyMethod(ctx, fasthttp.MethodPost)
		return
	}
	if len(guard.token) == 0 {
		reply.Error(ctx, errLoginOff())
		return
	}
	if o := ctx.Request.Header.Peek("Origin"); len(o) > 0 && !sessionCSRF(ctx) {
		reply.Error(ctx, errCrossOrigin(string(o)))
		return
	}
	now := time.Now()
	if wait := h.logins.wait(now); wait > 0 {
		reply.Error(ctx, errLoginThrottled(wait))
		return
	}
	tok := ctx.PostArgs().Peek("token")
	if len(tok) == 0 {
		tok = Bearer(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization))
	}
	if len(tok) == 0 || subtle.ConstantTimeCompare(tok, guard.token) != 1 {
		if log, unlogged := h.logins.failed(now); log {
			h.log.Warn("admin login refused: wrong token", "remote", ctx.RemoteIP().String(), "unlogged_since_last", unlogged)
		}
		if strings.Contains(string(ctx.Request.Header.Peek("Accept")), "text/html") {
			loginPage(ctx, 403, next, "That is not the admin token.")
			return
		}
		reply.Error(ctx, errForbidden())
		return
	}
	c := fasthttp.AcquireCookie()
	defer fasthttp.ReleaseCookie(c)
	c.SetKey(cookieName)
	if secure(ctx) {
		c.SetKey(cookieNameSecure)
		c.SetSecure(true)
	}
	c.SetValue(guard.NewSession(time.Now().Add(SessionTTL)))
	c.SetPath("/")
	c.SetHTTPOnly(true)
	c.SetSameSite(fasthttp.CookieSameSiteStrictMode)
	c.SetMaxAge(int(SessionTTL.Seconds()))
	ctx.Response.Header.SetCookie(c)
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
	h.log.Info("admin login", "remote", ctx.RemoteIP().String(), "expires_in", SessionTTL.String())
	seeOther(ctx, next)
}

// serveLogout answers POST /admin/logout: the cookie is cleared. A session
// cannot be revoked alone: a new admin token ends them all.
func (h *Handler) serveLogout(ctx *fasthttp.RequestCtx) {
	if !reply.OnlyMethod(ctx, fasthttp.MethodPost) {
		return
	}
	if o := ctx.Request.Header.Peek("Origin"); len(o) > 0 && !sessionCSRF(ctx) {
		reply.Error(ctx, errCrossOrigin(string(o)))
		return
	}
	for _, name := range []string{cookieName, cookieNameSecure} {
		c := fasthttp.AcquireCookie()
		c.SetKey(name)
		c.SetPath("/")
		c.SetHTTPOnly(true)
		c.SetSecure(name == cookieNameSecure)
		c.SetSameSite(fasthttp.CookieSameSiteStrictMode)
		c.SetExpire(fasthttp.CookieExpireDelete)
		ctx.Response.Header.SetCookie(c)
		fasthttp.ReleaseCookie(c)
	}
	seeOther(ctx, "/admin/login")
}

func loginPage(ctx *fasthttp.RequestCtx, status int, next, msg string) {
	page := strings.NewReplacer("{{next}}", html.EscapeString(next), "{{error}}", html.EscapeString(msg)).Replace(loginHTML)
	ctx.SetStatusCode(status)
	ctx.SetContentType("text/html; charset=utf-8")
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
	ctx.Response.Header.Set("X-Frame-Options", "DENY")
	ctx.SetBodyString(page)
}

// seeOther redirects to a path of this gateway, as given: a relative
// Location, so that a proxy's rewritten Host never leaks into it.
func seeOther(ctx *fasthttp.RequestCtx, path string) {
	ctx.Response.Header.Set(fasthttp.HeaderLocation, path)
	ctx.SetStatusCode(fasthttp.StatusSeeOther)
}
