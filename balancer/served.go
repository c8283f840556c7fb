package balancer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"frontdoor/internal/suggest"
)

// The models check: at every probe that passes, the node's engine is asked
// which models it serves (vLLM, SGLang and llm-d: GET /v1/models, data[].id;
// TGI: GET /info, model_id), and each configured model it does not list is
// a mismatch. A vLLM or SGLang node gets no request for a model it does not
// serve (it would answer 404); TGI ignores the model a request names, so
// there a mismatch is reported and nothing more. A node whose endpoint
// fails, is missing or answers something else than a model list is not
// checked: the check never takes a node out for want of an answer.

// maxModelsBody caps the models document read; a longer one is not checked.
const maxModelsBody = 1 << 20

// servedCheck is the last good reading of what a node's engine serves.
// Immutable once stored.
type servedCheck struct {
	served  []string          // the engine's model ids, in its order
	missing map[string]string // configured model → closest served one ("" none); nil when all are served
	enforce bool              // mismatched models take the node out for them (not TGI)
}

// ModelMismatch is a configured model the node's engine does not serve.
type ModelMismatch struct {
	Model   string   `json:"model"`
	Served  []string `json:"served"`            // what the engine lists
	Closest string   `json:"closest,omitempty"` // the served name it most likely means
	// Routed is true on a TGI node, which ignores the model a request
	// names: the mismatch is reported and the node still gets requests.
	Routed  bool   `json:"routed"`
	Message string `json:"message"`
}

// mismatched reports whether the node gets no requests for model because
// its engine does not serve it.
func (n *Node) mismatched(model string) bool {
	c := n.served.Load()
	if c == nil || !c.enforce || c.missing == nil {
		return false
	}
	_, ok := c.missing[model]
	return ok
}

// modelsURL is where the node lists its models, "" for kinds not checked.
func modelsURL(nc NodeConfig, kind engineKind) string {
	switch kind {
	case kindVLLM, kindSGLang:
		return serverRoot(nc.URL) + "/v1/models"
	case kindTGI:
		return serverRoot(nc.URL) + "/info"
	}
	return ""
}

var errNotModelList = errors.New("the answer is not a model list")

// parseServed reads a /v1/models list (data[].id) or, for TGI, an /info
// document (model_id).
func parseServed(kind engineKind, body []byte) ([]string, error) {
	if len(body) > maxModelsBody {
		return nil, fmt.Errorf("%w: over %d bytes", errNotModelList, maxModelsBody)
	}
	if kind == kindTGI {
		var info struct {
			ModelID string `json:"model_id"`
		}
		if err := json.Unmarshal(body, &info); err != nil || info.ModelID == "" {
			return nil, errNotModelList
		}
		return []string{info.ModelID}, nil
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil || len(list.Data) == 0 {
		return nil, errNotModelList
	}
	out := make([]string, 0, len(list.Data))
	for _, d := range list.Data {
		if d.ID != "" && len(out) < 1000 && !slices.Contains(out, d.ID) {
			out = append(out, d.ID)
		}
	}
	if len(out) == 0 {
		return nil, errNotModelList
	}
	return out, nil
}

// compareServed returns the configured models absent from served, each
// with its closest served name; nil when every one is served.
func compareServed(configured, served []string) map[string]string {
	var missing map[string]string
	for _, m := range configured {
		if slices.Contains(served, m) {
			continue
		}
		if missing == nil {
			missing = map[string]string{}
		}
		missing[m] = closestModel(m, served)
	}
	return missing
}

// closestModel is the served name m most likely means: equal ignoring
// case, then equal after the last "/" ignoring case (an organisation
// prefix), then the smallest edit distance if small; "" if none is close.
func closestModel(m string, served []string) string {
	lm, bm := strings.ToLower(m), baseName(m)
	for _, s := range served {
		if strings.ToLower(s) == lm {
			return s
		}
	}
	for _, s := range served {
		if baseName(s) == bm {
			return s
		}
	}
	bases := make([]string, len(served))
	for i, s := range served {
		bases[i] = baseName(s)
	}
	if near := suggest.Nearest(bm, bases); near != "" {
		return served[slices.Index(bases, near)]
	}
	return ""
}

func baseName(s string) string {
	s = strings.ToLower(s)
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// mismatchMessage says what is wrong and where to fix it; entry is the
// node's index in nodes: (-1 unknown).
func mismatchMessage(model, node string, served []string, closest string, entry int) string {
	q := make([]string, len(served))
	for i, s := range served {
		q[i] = strconv.Quote(s)
	}
	msg := fmt.Sprintf("model %q is configured on %s, but the node serves [%s]", model, node, strings.Join(q, ", "))
	if closest != "" {
		msg += fmt.Sprintf(" (closest: %q)", closest)
	}
	if entry >= 0 {
		msg += fmt.Sprintf("; fix nodes[%d].models", entry)
	}
	return msg
}

// checkModels reads what the node's engine serves and compares it with
// its configuration, logging what changed. A failed read keeps the last
// verdict on a transport error and drops it otherwise (no check).
func (p *Pool) checkModels(n *Node) {
	if n.modelsURL == "" {
		return
	}
	// The periodic probe and an explicit one (ProbeAll, check-config) may
	// run together: one check logs a change before the next compares.
	n.checking.Lock()
	defer n.checking.Unlock()
	var served []string
	status := 0
	err := p.fetch(n.modelsURL, n.shownModelsURL, p.conf().HealthInterval.D(), n.modelsAuth, &status, func(body []byte) error {
		var err error
		served, err = parseServed(n.kind, body)
		return err
	})
	if err != nil {
		if status == 0 && !errors.Is(err, errNotModelList) {
			return // unreachable now: the health probe speaks to that
		}
		n.served.Store(nil)
		n.mu.Lock()
		noted := n.modelsNoted
		n.modelsNoted = true
		n.mu.Unlock()
		if !noted {
			p.log.Info("node's served models not checked: its models endpoint gives no model list",
				"node", n.cfg.Name, "error", err.Error())
		}
		return
	}
	c := &servedCheck{served: served, missing: compareServed(n.cfg.Models, served), enforce: n.kind != kindTGI}
	old := n.served.Swap(c)
	entry := p.entryIndex(n)
	for _, m := range n.cfg.Models {
		closest, miss := c.missing[m]
		wasMiss := false
		if old != nil {
			_, wasMiss = old.missing[m]
		}
		switch {
		case miss && (!wasMiss || !slices.Equal(old.served, served)):
			effect := "it gets no requests for it until it does"
			if !c.enforce {
				effect = "TGI ignores the model a request names, so it still gets them"
			}
			p.log.Warn("node does not serve a configured model: "+effect,
				"node", n.cfg.Name, "model", m, "configured", n.cfg.Models, "served", served, "closest", closest,
				"problem", mismatchMessage(m, n.cfg.Name, served, closest, entry))
		case !miss && wasMiss:
			p.log.Info("node serves its configured model again", "node", n.cfg.Name, "model", m)
		}
	}
	if len(c.missing) < len(n.cfg.Models) && (old == nil || len(old.missing) > 0) {
		n.wake() // it may take requests it could not
	}
}

// entryIndex is the index in nodes: of the entry n comes from, -1 if gone.
func (p *Pool) entryIndex(n *Node) int {
	name := n.cfg.Name
	if n.entry != "" {
		name = n.entry
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, e := range p.entries {
		if e.Name == name {
			return i
		}
	}
	return -1
}

// mismatches is the node's mismatched models as the admin API shows them.
func (p *Pool) mismatches(n *Node) (served []string, out []ModelMismatch) {
	c := n.served.Load()
	if c == nil {
		return nil, nil
	}
	entry := -2
	for _, m := range n.cfg.Models {
		closest, miss := c.missing[m]
		if !miss {
			continue
		}
		if entry == -2 {
			entry = p.entryIndex(n)
		}
		out = append(out, ModelMismatch{Model: m, Served: c.served, Closest: closest, Routed: !c.enforce,
			Message: mismatchMessage(m, n.cfg.Name, c.served, closest, entry)})
	}
	return append([]string(nil), c.served...), out
}

// ModelMismatch says why no node takes model when every node configured
// for it does not serve it (one message per node, joined by "; "); ok is
// false when some node configured for it is not known to mismatch.
func (p *Pool) ModelMismatch(model string) (msg string, ok bool) {
	nodes := p.set.Load().byModel[model]
	if len(nodes) == 0 {
		return "", false
	}
	var msgs []string
	for _, n := range nodes {
		if !n.mismatched(model) {
			return "", false
		}
		c := n.served.Load()
		msgs = append(msgs, mismatchMessage(model, n.cfg.Name, c.served, c.missing[model], p.entryIndex(n)))
	}
	return strings.Join(msgs, "; "), true
}

// ProbeResult is one node's pre-deploy check (CheckNodes).
type ProbeResult struct {
	Node     string
	Problems []string // each makes the check fail
	Notes    []string // worth saying, not a failure
}

// CheckNodes probes every node once, as serve would at start: its health
// endpoint, and the models its engine serves against its configuration.
// Entries with discover: dns are resolved once first. It is for
// check-config --probe.
func (p *Pool) CheckNodes() []ProbeResult {
	p.mu.Lock()
	entries := p.entries
	p.mu.Unlock()
	var out []ProbeResult
	for _, e := range entries {
		if e.Discover != "" {
			out = append(out, ProbeResult{Node: e.Name, Notes: []string{"discover: dns entry: its nodes are not probed here"}})
		}
	}
	for _, n := range p.Nodes() {
		r := ProbeResult{Node: n.cfg.Name}
		if err := p.get(n.healthURL, n.shownHealthURL, p.conf().HealthInterval.D(), nil); err != nil {
			r.Problems = append(r.Problems, fmt.Sprintf("%s: health probe failed: %v", n.cfg.Name, err))
			out = append(out, r)
			continue
		}
		if n.modelsURL == "" {
			r.Notes = append(r.Notes, n.cfg.Name+": kind "+n.cfg.Kind+": served models not checked")
			out = append(out, r)
			continue
		}
		n.served.Store(nil)
		p.checkModels(n)
		c := n.served.Load()
		switch {
		case c == nil:
			r.Notes = append(r.Notes, n.cfg.Name+": served models not checked: "+n.shownModelsURL+" gives no model list")
		default:
			_, mm := p.mismatches(n)
			for _, m := range mm {
				if m.Routed {
					r.Notes = append(r.Notes, m.Message)
				} else {
					r.Problems = append(r.Problems, m.Message)
				}
			}
		}
		out = append(out, r)
	}
	return out
}

// modelsAuthFor is the Authorization header for the node's models
// endpoint: vLLM's --api-key guards /v1/models too.
func modelsAuthFor(nc NodeConfig) string {
	if nc.APIKeyEnv == "" {
		return ""
	}
	if k := os.Getenv(nc.APIKeyEnv); k != "" {
		return "Bearer " + k
	}
	return ""
}
