package router

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"github.com/valyala/fasthttp"

	"frontdoor/adapters"
	"frontdoor/internal/reply"
	"frontdoor/router/admin"
)

// DefaultTenant is the tenant of requests without a (known) key when auth
// is not required.
const DefaultTenant = "default"

// tenant is a configured tenant, ready for the hot path.
type tenant struct {
	name           string
	namespace      string
	models         map[string]bool // nil: every model
	spillover      bool
	allowThreshold bool
	cfg            Tenant
}

// Allows reports whether the tenant may use model (the name it asked for).
func (t *tenant) allows(model string) bool { return t.models == nil || t.models[model] }

// names reports whether the tenant's allow-list names model itself.
func (t *tenant) names(model string) bool { return t.models != nil && t.models[model] }

// tenantSet maps API keys to tenants. Keys are held only as SHA-256
// digests: the raw key is never stored, logged or put in a metric label.
type tenantSet struct {
	byDigest map[[32]byte]*tenant
	byName   map[string]*tenant
	def      *tenant
	required bool
	admin    []byte // the admin token: with it, X-Frontdoor-Tenant names the tenant
}

func newTenantSet(cfg Config, adminToken []byte) (*tenantSet, error) {
	ts := &tenantSet{byDigest: map[[32]byte]*tenant{}, byName: map[string]*tenant{}, required: cfg.Auth.Required, admin: adminToken}
	for _, tc := range cfg.Tenants {
		t := &tenant{name: tc.Name, namespace: tc.CacheNamespace, spillover: tc.Spillover == nil || *tc.Spillover,
			allowThreshold: tc.AllowCacheThreshold, cfg: tc}
		if t.namespace == "" {
			t.namespace = tc.Name
		}
		if len(tc.Models) > 0 {
			t.models = map[string]bool{}
			for _, m := range tc.Models {
				if m == "*" {
					t.models = nil
					break
				}
				t.models[m] = true
			}
		}
		if tc.APIKeysEnv != "" {
			for _, k := range strings.Split(os.Getenv(tc.APIKeysEnv), ",") {
				if k = strings.TrimSpace(k); k != "" {
					ts.byDigest[sha256.Sum256([]byte(k))] = t
				}
			}
		}
		for _, h := range tc.APIKeySHA256 {
			var d [32]byte
			if _, err := hex.Decode(d[:], []byte(strings.ToLower(h))); err != nil {
				return nil, fmt.Errorf("tenants: %s: api_key_sha256: %w", tc.Name, err)
			}
			ts.byDigest[d] = t
		}
		ts.byName[t.name] = t
	}
	ts.def = ts.byName[DefaultTenant]
	if ts.def == nil {
		ts.def = &tenant{name: DefaultTenant, namespace: DefaultTenant, spillover: true}
		ts.byName[DefaultTenant] = ts.def
	}
	return ts, nil
}

// operator reports whether a request comes from the operator: the
// gateway's own warm-up, the admin listener, or the admin token. What it
// stores is curated.
func (ts *tenantSet) operator(ctx *fasthttp.RequestCtx) bool {
	if tok := ctx.Request.Header.Peek(headerWarm); len(tok) > 0 && subtle.ConstantTimeCompare(tok, []byte(warmToken)) == 1 {
		return true
	}
	if admin.OnListener(ctx) {
		return true
	}
	key := admin.Bearer(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization))
	return len(ts.admin) > 0 && len(key) > 0 && subtle.ConstantTimeCompare(key, ts.admin) == 1
}

// resolve identifies the tenant of a request from its bearer key. The key
// is compared by its SHA-256 digest, so the lookup's timing says nothing
// about the key itself.
func (ts *tenantSet) resolve(ctx *fasthttp.RequestCtx) (*tenant, *adapters.APIError) {
	if tok := ctx.Request.Header.Peek(headerWarm); len(tok) > 0 && subtle.ConstantTimeCompare(tok, []byte(warmToken)) == 1 {
		if t := ts.byName[string(ctx.Request.Header.Peek("X-Frontdoor-Tenant"))]; t != nil {
			return t, nil
		}
		return ts.def, nil
	}
	key := admin.Bearer(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization))
	// The admin token, or the admin listener, may act for any tenant
	// (frontdoor warm does).
	if name := ctx.Request.Header.Peek("X-Frontdoor-Tenant"); len(name) > 0 &&
		(admin.OnListener(ctx) || len(ts.admin) > 0 && subtle.ConstantTimeCompare(key, ts.admin) == 1) {
		if t := ts.byName[string(name)]; t != nil {
			return t, nil
		}
		return nil, reply.UnknownTenant()
	}
	if len(key) > 0 {
		d := sha256.Sum256(key)
		if t, ok := ts.byDigest[d]; ok {
			return t, nil
		}
	}
	if !ts.required {
		return ts.def, nil
	}
	if len(key) == 0 {
		return nil, reply.MissingAPIKey()
	}
	return nil, reply.InvalidAPIKey()
}
