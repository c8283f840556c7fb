package router

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"frontdoor/balancer"
	"frontdoor/internal/testenv"
)

// GET /v1/models lists every model the nodes serve, embedding models
// included, and the aliases, as far as the caller's tenant may use them;
// with auth required it needs a key.
func TestModelsPerTenant(t *testing.T) {
	cfg := testConfig(testenv.GPUSim(t, nil), testenv.GPUSim(t, nil))
	cfg.Nodes[0].Models = []string{"qwen3-8b"}
	cfg.Nodes[1].Models = []string{"bge-m3", "qwen3-8b"}
	cfg.Models = []balancer.ModelAlias{{Name: "embed", Targets: []balancer.ModelTarget{{Model: "bge-m3", Weight: 1}}}}
	cfg.Auth.Required = true
	t.Setenv("TEST_ACME_KEYS", "sk-acme")
	t.Setenv("TEST_GLOBEX_KEYS", "sk-globex")
	cfg.Tenants = []Tenant{{Name: "acme", APIKeysEnv: "TEST_ACME_KEYS", Models: []string{"bge-m3", "embed"}},
		{Name: "globex", APIKeysEnv: "TEST_GLOBEX_KEYS"}}
	gw := startGateway(t, cfg)
	list := func(key string) (int, []string) {
		req, _ := http.NewRequest(http.MethodGet, gw.URL+"/v1/models", nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var l struct {
			Data []struct{ ID string } `json:"data"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&l)
		ids := []string{}
		for _, m := range l.Data {
			ids = append(ids, m.ID)
		}
		return resp.StatusCode, ids
	}
	if code, ids := list(""); code != 401 {
		t.Errorf("without a key: %d %v, want 401", code, ids)
	}
	if code, ids := list("sk-acme"); code != 200 || !reflect.DeepEqual(ids, []string{"bge-m3", "embed"}) {
		t.Errorf("acme: %d %v, want its two", code, ids)
	}
	if code, ids := list("sk-globex"); code != 200 || !reflect.DeepEqual(ids, []string{"bge-m3", "qwen3-8b", "embed"}) {
		t.Errorf("globex: %d %v, want every model and the alias", code, ids)
	}
	sdk := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("sk-acme"), option.WithMaxRetries(0))
	page, err := sdk.Models.List(context.Background())
	if err != nil || len(page.Data) != 2 || page.Data[0].ID != "bge-m3" {
		t.Fatalf("the SDK's list: %v %+v", err, page)
	}
}
