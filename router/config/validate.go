package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strings"
	"time"

	"frontdoor/adapters"
	"frontdoor/balancer"
	"frontdoor/cache"
	"frontdoor/router/admin"
)

// Problems validates the whole config and returns every problem found,
// each prefixed with its YAML path. Each section checks itself (its
// Validate method, keys relative to the section); Problems puts each
// section's problems under its path and checks what spans sections: the
// listen address, redis when something uses it, names used twice, a
// gateway that would be its own node, at least one node, and the model
// names that meet at run time.
func (c *Config) Problems() []string {
	var out []string
	add := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	section := func(path string, err error) { out = appendSection(out, path, err) }
	if c.Listen == "" {
		add("listen: is required")
	} else if err := checkListen(c.Listen); err != nil {
		add("listen: %v", err)
	}
	section("server", c.Server.Validate())
	section("limits", c.Limits.Validate())
	section("timeouts", c.Timeouts.Validate())
	section("shutdown", c.Shutdown.Validate())
	// timeouts.client is listed after the shutdown: section's problems,
	// where it always has been.
	if c.Timeouts.Client <= 0 {
		add("timeouts.client: must be > 0")
	}
	section("admin", c.Admin.Validate(c.Listen))
	// The token is read where serve, reload and check-config run: a
	// placeholder or a weak one (admin.Token) is refused by all three.
	if _, err := admin.Token(c.Admin.TokenEnv); err != nil {
		add("%v", err)
	}
	section("logging", c.Logging.Validate())
	usesRedis := c.Cache.Backend == "redis" || c.Admission.Backend == "redis"
	if usesRedis {
		section("redis", c.Redis.Validate())
	}
	section("cache", c.Cache.Validate())
	section("admission", c.Admission.Validate())
	tenantNames := map[string]bool{}
	for i := range c.Tenants {
		t := &c.Tenants[i]
		p := fmt.Sprintf("tenants[%d]", i)
		if t.Name != "" && tenantNames[t.Name] {
			add("%s.name: %q is used twice", p, t.Name)
		}
		tenantNames[t.Name] = true
		section(p, t.Validate())
	}
	nodeNames := map[string]bool{}
	for i := range c.Nodes {
		n := &c.Nodes[i]
		p := fmt.Sprintf("nodes[%d]", i)
		section(p, n.Validate())
		if n.Name != "" && nodeNames[n.Name] {
			add("%s.name: %q is used twice", p, n.Name)
		}
		nodeNames[n.Name] = true
	}
	section("balancer", c.Balancer.Validate())
	out = append(out, c.selfNodeProblems()...)
	section("spillover", c.Spillover.Validate())
	if !c.Spillover.Enabled {
		for i, t := range c.Tenants {
			if t.MaxPredictedTTFT > 0 {
				add("tenants[%d].max_predicted_ttft: needs spillover.enabled: true (a request predicted to be slow spills to the hosted API)", i)
			}
		}
	}
	if len(c.Nodes) == 0 && !c.Spillover.Enabled {
		add("nodes: configure at least one node (or enable spillover)")
	}
	for i, m := range c.Models {
		section(fmt.Sprintf("models[%d]", i), validateAlias(m))
	}
	section("warm", c.Warm.Validate())
	section("responses", c.Responses.Validate())
	section("tracing", c.Tracing.Validate())
	section("passthrough", c.Passthrough.Validate())
	out = append(out, c.modelProblems()...)
	return out
}

// appendSection appends a section's problems (err's lines) under its
// path: "key: ..." under "p" is "p.key: ...", and ": ...", a problem of
// the section as a whole, is "p: ...".
func appendSection(out []string, path string, err error) []string {
	if err == nil {
		return out
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		if strings.HasPrefix(line, ":") {
			out = append(out, path+line)
		} else {
			out = append(out, path+"."+line)
		}
	}
	return out
}

// problemList gathers a section's problems for its Validate method; key is
// the key relative to the section, "" for the section as a whole.
type problemList []error

func (ps *problemList) add(key, format string, a ...any) {
	*ps = append(*ps, errors.New(key+": "+fmt.Sprintf(format, a...)))
}

func (ps problemList) err() error { return errors.Join(ps...) }

// Validate reports the removed keys present.
func (s *Server) Validate() error {
	var ps problemList
	for _, k := range s.removed {
		ps.add(k, "removed in this version: frontdoor has one HTTP server (fasthttp); delete the key")
	}
	return ps.err()
}

// maxBodyItems bounds limits.max_messages, max_content_parts and
// max_token_ids: past it the bound no longer bounds the memory of a body.
const maxBodyItems = 1 << 22

// Validate checks the section. Errors are prefixed with their YAML key.
func (l *Limits) Validate() error {
	var ps problemList
	if l.MaxBodyBytes < 1024 {
		ps.add("max_body_bytes", "must be at least 1024")
	}
	if v := l.MaxUpstreamBodyBytes; v < minUpstreamBody || v > maxUpstreamBody {
		ps.add("max_upstream_body_bytes", "must be between 64KiB and 1GiB (a node's whole answer, held in memory while it is read)")
	}
	for _, b := range []struct {
		key string
		v   int
	}{{"max_messages", l.MaxMessages}, {"max_content_parts", l.MaxContentParts}, {"max_token_ids", l.MaxTokenIDs}} {
		if b.v < 1 || b.v > maxBodyItems {
			ps.add(b.key, "must be between 1 and %d", maxBodyItems)
		}
	}
	if l.ParseBudgetBytes < adapters.ParseCostPerByte*l.MaxBodyBytes {
		ps.add("parse_budget_bytes", "must be at least %d times max_body_bytes (what a body of max_body_bytes read as one string costs)", adapters.ParseCostPerByte)
	}
	if w := l.ParseWait; w < 0 || w.D() > time.Minute {
		ps.add("parse_wait", "must be between 0 and 1m")
	}
	return ps.err()
}

// Validate checks the section but for client, which Problems checks (after
// the shutdown: section). Errors are prefixed with their YAML key, ": "
// alone for the section as a whole.
func (t *Timeouts) Validate() error {
	var ps problemList
	if t.Connect <= 0 || t.FirstByte <= 0 || t.Idle <= 0 || t.Total <= 0 {
		ps.add("", "connect, first_byte, idle and total must all be > 0")
	}
	if t.Shutdown != 0 {
		ps.add("shutdown", "moved to shutdown.grace (with shutdown.drain_delay before it); rename the key")
	}
	return ps.err()
}

// Validate checks the section. Errors are prefixed with ": ", for the
// section as a whole.
func (s *Shutdown) Validate() error {
	var ps problemList
	if s.DrainDelay < 0 || s.Grace < 0 {
		ps.add("", "drain_delay and grace must be >= 0")
	}
	return ps.err()
}

// Validate checks the section; listen is the main listener's address,
// which admin.listen must not be. Errors are prefixed with their YAML key.
func (a *Admin) Validate(listen string) error {
	var ps problemList
	if a.Listen != "" {
		if err := checkListen(a.Listen); err != nil {
			ps.add("listen", "%v", err)
		} else if a.Listen == listen && !strings.HasSuffix(listen, ":0") {
			ps.add("listen", "must differ from listen (%s): the admin listener trusts every request on it", listen)
		}
	}
	for i, cidr := range a.AllowCIDRs {
		if _, err := admin.ParseCIDR(cidr); err != nil {
			ps.add(fmt.Sprintf("allow_cidrs[%d]", i), "%v", err)
		}
	}
	return ps.err()
}

// Validate checks the section. Errors are prefixed with their YAML key.
func (l *Logging) Validate() error {
	var ps problemList
	switch l.Level {
	case "debug", "info", "warn", "error":
	default:
		ps.add("level", "%q is not one of debug, info, warn, error", l.Level)
	}
	switch l.Format {
	case "json", "text":
	default:
		ps.add("format", "%q is not one of json, text", l.Format)
	}
	if d := l.FlushInterval.D(); d < 0 || d > time.Minute {
		ps.add("flush_interval", "must be between 0s and 1m")
	}
	return ps.err()
}

// Validate checks the section. Errors are prefixed with their YAML key.
func (a *Admission) Validate() error {
	var ps problemList
	switch a.Backend {
	case "local", "redis":
	default:
		ps.add("backend", "%q is not one of local, redis", a.Backend)
	}
	if a.Global.RPS < 0 || a.Global.Burst < 0 || a.Global.TokensPerMinute < 0 {
		ps.add("global", "rps, burst and tokens_per_minute must be >= 0")
	}
	if a.MaxWait < 0 {
		ps.add("max_wait", "must be >= 0")
	}
	if a.Replicas < 1 {
		ps.add("replicas", "must be >= 1")
	}
	return ps.err()
}

// Validate checks one tenant; Problems checks that names are unique.
// Errors are prefixed with their YAML key, ": " alone for the tenant as a
// whole.
func (t *Tenant) Validate() error {
	var ps problemList
	if t.Name == "" {
		ps.add("name", "is required")
	}
	for j, h := range t.APIKeySHA256 {
		if len(h) != 64 || strings.Trim(strings.ToLower(h), "0123456789abcdef") != "" {
			ps.add(fmt.Sprintf("api_key_sha256[%d]", j), "must be 64 hex digits")
		}
	}
	if t.RPS < 0 || t.Burst < 0 || t.TokensPerMinute < 0 || t.MaxConcurrency < 0 {
		ps.add("", "rps, burst, tokens_per_minute and max_concurrency must be >= 0")
	}
	if t.MaxPredictedTTFT < 0 {
		ps.add("max_predicted_ttft", "must be >= 0 (0: spillover.max_predicted_ttft's)")
	}
	if t.CacheThreshold < 0 || t.CacheThreshold > 1 {
		ps.add("cache_threshold", "must be in (0, 1], or 0 for cache.semantic.threshold")
	}
	for m, v := range t.CacheModelThresholds {
		if v <= 0 || v > 1 {
			ps.add("cache_model_thresholds."+m, "must be in (0, 1]")
		}
	}
	return ps.err()
}

// Validate checks the section when it is enabled. Errors are prefixed
// with their YAML key, ": " alone for the section as a whole.
func (s *Spillover) Validate() error {
	var ps problemList
	s.Price.validate(&ps)
	if s.MaxPredictedTTFT < 0 {
		ps.add("max_predicted_ttft", "must be >= 0 (0: off)")
	}
	for _, m := range slices.Sorted(maps.Keys(s.MaxPredictedTTFTModels)) {
		if s.MaxPredictedTTFTModels[m] < 0 {
			ps.add("max_predicted_ttft_models."+m, "must be >= 0 (0: spillover.max_predicted_ttft's)")
		}
	}
	if !s.Enabled {
		set := s.MaxPredictedTTFT > 0
		for _, d := range s.MaxPredictedTTFTModels {
			set = set || d > 0
		}
		if set {
			ps.add("max_predicted_ttft", "needs spillover.enabled: true (a request predicted to be slow spills to the hosted API)")
		}
		return ps.err()
	}
	switch s.Kind {
	case "dashscope", "openai":
	default:
		ps.add("kind", "%q is not one of dashscope, openai", s.Kind)
	}
	if s.BaseURL == "" && s.Region == "" {
		ps.add("base_url", "is required")
	} else if _, err := s.URL(); err != nil {
		ps = append(ps, err)
	}
	for i, on := range s.On {
		if on != "saturated" && on != "failed" {
			ps.add(fmt.Sprintf("on[%d]", i), "%q is not one of saturated, failed", on)
		}
	}
	if s.RPM < 0 || s.TPM < 0 {
		ps.add("", "rpm and tpm must be >= 0")
	}
	if u := s.ResponsesURL; u != "" {
		if r, err := url.Parse(u); err != nil || (r.Scheme != "http" && r.Scheme != "https") || r.Host == "" {
			ps.add("responses_url", "must be an http:// or https:// URL")
		} else if b, err := url.Parse(s.BaseURL); err == nil && s.BaseURL != "" && (b.Host != r.Host || b.Scheme != r.Scheme) {
			ps.add("responses_url", "must be on base_url's scheme and host (%s://%s)", b.Scheme, b.Host)
		}
	}
	return ps.err()
}

// Validate checks the section. Errors are prefixed with their YAML key.
func (r *ResponsesConfig) Validate() error {
	var ps problemList
	if r.RememberIDs < 0 || r.RememberIDs > 10_000_000 {
		ps.add("remember_ids", "must be between 0 and 10000000")
	}
	if r.RememberIDs > 0 && r.RememberFor.D() <= 0 {
		ps.add("remember_for", "must be > 0")
	}
	return ps.err()
}

// URL is the base URL requests spill to: base_url, or region's when
// base_url is empty or the default. The error names its key.
func (s *Spillover) URL() (string, error) {
	base := s.BaseURL
	if s.Region != "" && (base == "" || base == DefaultConfig().Spillover.BaseURL) {
		var ok bool
		if base, ok = adapters.DashScopeRegions[s.Region]; !ok {
			return "", fmt.Errorf("region: %q is not one of beijing, singapore, us", s.Region)
		}
		return base, nil
	}
	if _, err := adapters.BaseURL(base); err != nil {
		return "", fmt.Errorf("base_url: %w", err)
	}
	return base, nil
}

// validate checks spillover.price: finite prices >= 0, a currency of
// at most 8 letters.
func (p *SpillPrice) validate(ps *problemList) {
	for _, k := range []struct {
		key string
		v   float64
	}{{"price.input_per_million", p.InputPerMillion}, {"price.output_per_million", p.OutputPerMillion}} {
		if k.v < 0 || math.IsNaN(k.v) || math.IsInf(k.v, 0) {
			ps.add(k.key, "must be a number >= 0, got %v", k.v)
		}
	}
	if len(p.Currency) > 8 || strings.Trim(p.Currency, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz") != "" {
		ps.add("price.currency", "%q is not a currency of at most 8 letters (USD, CNY, ...)", p.Currency)
	}
}

// validateAlias checks one entry of models:; Problems checks that its
// targets are served. Errors are prefixed with their YAML key.
func validateAlias(m balancer.ModelAlias) error {
	var ps problemList
	if m.Name == "" {
		ps.add("name", "is required")
	}
	if len(m.Targets) == 0 {
		ps.add("targets", "list at least one target")
	}
	var sum float64
	for j, t := range m.Targets {
		if t.Model == "" || t.Weight < 0 {
			ps.add(fmt.Sprintf("targets[%d]", j), "needs a model and a weight >= 0")
		}
		sum += max(t.Weight, 0)
	}
	if len(m.Targets) > 0 && sum <= 0 {
		ps.add("targets", "at least one weight must be > 0")
	}
	return ps.err()
}

// Validate checks the section. Errors are prefixed with their YAML key.
func (w *Warm) Validate() error {
	var ps problemList
	if w.HotEntries < 0 {
		ps.add("hot_entries", "must be >= 0")
	}
	if w.Tag != "" && cache.ValidTag([]byte(w.Tag)) == "" {
		ps.add("tag", "1 to 128 letters, digits or ._:/@+-")
	}
	if w.Concurrency < 1 {
		ps.add("concurrency", "must be >= 1")
	}
	return ps.err()
}

// modelProblems checks the names that meet at run time: every alias or
// canary target is served by a node or by spill-over's model_map (else the
// share of requests it gets is a 503 that no retry helps), and every
// model a tenant may use exists, and every model with its own
// max_predicted_ttft is served by a node (the limit is looked up by the
// served model, after alias resolution).
func (c *Config) modelProblems() []string {
	var out []string
	served := map[string]bool{}
	for _, n := range c.Nodes {
		for _, m := range n.Models {
			served[m] = true
		}
	}
	spilled := map[string]bool{}
	if c.Spillover.Enabled {
		for m := range c.Spillover.ModelMap {
			spilled[m] = true
		}
	}
	aliases := map[string]bool{}
	for _, m := range c.Models {
		aliases[m.Name] = true
	}
	known := func() string {
		var names []string
		for m := range served {
			names = append(names, m)
		}
		for m := range spilled {
			if !served[m] {
				names = append(names, m)
			}
		}
		slices.Sort(names)
		return strings.Join(names, ", ")
	}
	for i, m := range c.Models {
		for j, t := range m.Targets {
			if t.Model == "" || served[t.Model] || spilled[t.Model] {
				continue
			}
			msg := fmt.Sprintf("models[%d].targets[%d].model: %q is served by no node", i, j, t.Model)
			if c.Spillover.Enabled {
				msg += " and is not in spillover.model_map"
			}
			out = append(out, msg+"; served: "+known())
		}
	}
	for i, t := range c.Tenants {
		for j, m := range t.Models {
			if m == "*" || served[m] || spilled[m] || aliases[m] {
				continue
			}
			out = append(out, fmt.Sprintf("tenants[%d].models[%d]: %q is neither a served model nor an alias; served: %s", i, j, m, known()))
		}
	}
	for _, m := range slices.Sorted(maps.Keys(c.Spillover.MaxPredictedTTFTModels)) {
		if !served[m] {
			out = append(out, fmt.Sprintf("spillover.max_predicted_ttft_models.%s: %q is served by no node (the limit applies to the served model, after alias resolution); served: %s", m, m, known()))
		}
	}
	return out
}

// GatewayRoutes are the paths the gateway answers itself: no pass-through
// pattern may take them.
var GatewayRoutes = []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models",
	"/v1/responses", "/v1/responses/", "/healthz", "/readyz", "/metrics", "/status", "/dashboard", "/admin/", "/debug/"}

// Validate checks each path: an absolute path of letters, digits and
// "/_.-", optionally ending in /* (a prefix), none twice, none taking a
// route of the gateway's own.
func (p Passthrough) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for i, path := range p.Paths {
		base := strings.TrimSuffix(path, "*")
		switch {
		case !strings.HasPrefix(path, "/") || !SafePath(base) || strings.Contains(base, "*"):
			errs = append(errs, fmt.Errorf("paths[%d]: %q must be a path of letters, digits and /_.- such as /v1/rerank, or a prefix such as /v1/audio/*", i, path))
			continue
		case strings.HasSuffix(path, "*") && !strings.HasSuffix(base, "/"):
			errs = append(errs, fmt.Errorf("paths[%d]: %q: a prefix ends in /*", i, path))
			continue
		case seen[path]:
			errs = append(errs, fmt.Errorf("paths[%d]: %q is listed twice", i, path))
			continue
		}
		seen[path] = true
		for _, r := range GatewayRoutes {
			if PathMatches(path, r) || strings.HasSuffix(r, "/") && strings.HasPrefix(base, r) {
				errs = append(errs, fmt.Errorf("paths[%d]: %q would take %s, which the gateway answers itself", i, path, strings.TrimSuffix(r, "/")))
				break
			}
		}
	}
	return errors.Join(errs...)
}

// SafePath reports whether p holds only letters, digits and "/_.-", and
// no empty or dot-only segment.
func SafePath(p string) bool {
	for _, c := range []byte(p) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '/' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	for _, seg := range strings.Split(strings.Trim(p, "/"), "/") {
		if seg == "" && p != "/" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// PathMatches reports whether path is pattern, or lies below a /* prefix.
func PathMatches(pattern, path string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return len(path) > len(prefix) && strings.HasPrefix(path, prefix)
	}
	return path == pattern
}
