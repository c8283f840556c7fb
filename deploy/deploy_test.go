// Package deploy_test checks the deployment artifacts in deploy/: the
// Kubernetes manifests decode strictly into their API types, the kustomize
// overlay builds, the Compose file loads with the Compose spec's loader,
// and the Dockerfile's build command builds a static binary. There is no
// Docker engine or cluster here: these checks are what can be run without
// one. The heavy dependencies they use stay out of cmd/frontdoor (checked
// below).
package deploy_test

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"frontdoor/balancer"
	"frontdoor/router"
)

// newObject returns an empty object of the API type of apiVersion/kind.
func newObject(apiVersion, kind string) (any, bool) {
	switch apiVersion + "/" + kind {
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, true
	case "v1/Service":
		return &corev1.Service{}, true
	case "v1/Secret":
		return &corev1.Secret{}, true
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}, true
	case "autoscaling/v2/HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, true
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, true
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, true
	case "kustomize.config.k8s.io/v1beta1/Kustomization", "kustomize.config.k8s.io/v1alpha1/Component":
		return &kustypes.Kustomization{}, true
	}
	return nil, false
}

// decodeStrict decodes one YAML document into its API type: duplicate or
// unknown fields are errors.
func decodeStrict(doc []byte) (any, error) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, err
	}
	obj, ok := newObject(tm.APIVersion, tm.Kind)
	if !ok {
		return nil, fmt.Errorf("unexpected kind %s/%s", tm.APIVersion, tm.Kind)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		return nil, fmt.Errorf("%s %s: %w", tm.APIVersion, tm.Kind, err)
	}
	return obj, nil
}

func splitDocs(b []byte) [][]byte {
	var out [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			out = append(out, []byte(d))
		}
	}
	return out
}

func stripComments(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// checkFrontdoorConfig runs check-config's validation on a config document.
func checkFrontdoorConfig(t *testing.T, where, cfg string) router.Config {
	t.Helper()
	c, err := router.Parse([]byte(cfg))
	if err != nil {
		t.Fatalf("%s: the embedded config fails check-config: %v", where, err)
	}
	return c
}

// Every manifest under deploy/k8s decodes strictly into its k8s.io/api
// (or Prometheus Operator, or kustomize) type, and the base's workload is
// what the issue asks for.
func TestK8sManifestsDecodeStrictly(t *testing.T) {
	objs := map[string]any{}
	n := 0
	err := filepath.WalkDir("k8s", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, doc := range splitDocs(b) {
			obj, err := decodeStrict(doc)
			if err != nil {
				t.Errorf("%s (document %d): %v", path, i, err)
				continue
			}
			objs[path] = obj
			n++
			if cm, ok := obj.(*corev1.ConfigMap); ok {
				checkFrontdoorConfig(t, path, cm.Data["frontdoor.yaml"])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 12 {
		t.Fatalf("only %d manifests decoded", n)
	}

	cfg := checkFrontdoorConfig(t, "base ConfigMap", objs[filepath.Join("k8s", "base", "configmap.yaml")].(*corev1.ConfigMap).Data["frontdoor.yaml"])
	dep := objs[filepath.Join("k8s", "base", "deployment.yaml")].(*appsv1.Deployment)
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	switch {
	case c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz":
		t.Fatal("readiness probe is not GET /readyz")
	case c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz":
		t.Fatal("liveness probe is not GET /healthz")
	case c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil:
		t.Fatal("no preStop sleep")
	case c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero():
		t.Fatal("no resource requests")
	case pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot:
		t.Fatal("not runAsNonRoot")
	case c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem:
		t.Fatal("root filesystem not read-only")
	case pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil:
		t.Fatal("no pod anti-affinity")
	}
	// The termination grace covers preStop, drain_delay and grace.
	need := c.Lifecycle.PreStop.Sleep.Seconds + int64(cfg.Shutdown.DrainDelay.D().Seconds()) + int64(cfg.Shutdown.Grace.D().Seconds())
	if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds <= need {
		t.Fatalf("terminationGracePeriodSeconds %v does not cover preStop + drain_delay + grace = %ds", pod.TerminationGracePeriodSeconds, need)
	}
	// Every variable the config reads a secret from comes from the Secret.
	fromSecret := map[string]bool{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			fromSecret[e.Name] = true
		}
	}
	want := []string{cfg.Admin.TokenEnv, cfg.Spillover.APIKeyEnv}
	for _, tn := range cfg.Tenants {
		want = append(want, tn.APIKeysEnv)
	}
	for _, v := range want {
		if !fromSecret[v] {
			t.Fatalf("the config reads %s, which the Deployment does not take from a Secret", v)
		}
	}
	if len(cfg.Nodes) == 0 || cfg.Nodes[0].Discover != "dns" {
		t.Fatal("the base config does not discover vLLM pods through DNS")
	}
}

// The example overlay builds with kustomize, in process: its patches
// apply, and what comes out still decodes strictly.
func TestKustomizeOverlayApplies(t *testing.T) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	// The overlay's Secret comes from secrets.env, which the user writes:
	// without it the build fails, naming it.
	tree := filepath.Join(t.TempDir(), "k8s")
	if err := os.CopyFS(tree, os.DirFS("k8s")); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(filepath.Join(tree, "overlays/example/secrets.env"))
	if _, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(tree, "overlays/example")); err == nil || !strings.Contains(err.Error(), "secrets.env") {
		t.Fatalf("the overlay built without secrets.env: %v", err)
	}
	const token = "3f6c0b9a7e2d41c58b1f0e9d2a7c6b5e"
	env := "FRONTDOOR_ADMIN_TOKEN=" + token + "\nDASHSCOPE_API_KEY=sk-test\nACME_KEYS=sk-a,sk-b\n"
	if err := os.WriteFile(filepath.Join(tree, "overlays/example/secrets.env"), []byte(env), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"base", "overlays/example"} {
		rm, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(tree, dir))
		if err != nil {
			t.Fatalf("kustomize build %s: %v", dir, err)
		}
		if dir == "base" {
			continue
		}
		kinds := map[string]any{}
		for _, r := range rm.Resources() {
			y, err := r.AsYAML()
			if err != nil {
				t.Fatal(err)
			}
			obj, err := decodeStrict(y)
			if err != nil {
				t.Fatalf("%s: built %s does not decode: %v", dir, r.CurId(), err)
			}
			if r.GetNamespace() != "llm" {
				t.Fatalf("%s: %s not in namespace llm", dir, r.CurId())
			}
			kinds[r.GetKind()+"/"+r.GetName()] = obj
		}
		dep, ok := kinds["Deployment/frontdoor"].(*appsv1.Deployment)
		if !ok {
			t.Fatalf("no Deployment in %v", kinds)
		}
		c := dep.Spec.Template.Spec.Containers[0]
		if c.Image != "registry.example.com/frontdoor:v1.0.0" {
			t.Fatalf("image %q: the images: override did not apply", c.Image)
		}
		if got := c.Resources.Requests.Cpu().String(); got != "2" {
			t.Fatalf("cpu request %s: the resources patch did not apply", got)
		}
		if c.ReadinessProbe == nil || c.Lifecycle == nil {
			t.Fatal("the patch dropped the probes or the preStop")
		}
		if hpa := kinds["HorizontalPodAutoscaler/frontdoor"].(*autoscalingv2.HorizontalPodAutoscaler); *hpa.Spec.MinReplicas != 4 || hpa.Spec.MaxReplicas != 20 {
			t.Fatalf("HPA %d..%d: the replicas patch did not apply", *hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas)
		}
		cm := kinds["ConfigMap/frontdoor-config"].(*corev1.ConfigMap)
		cfg := checkFrontdoorConfig(t, "overlay ConfigMap", cm.Data["frontdoor.yaml"])
		if cfg.Admission.Replicas != 4 {
			t.Fatal("the ConfigMap patch did not apply")
		}
		for _, want := range []string{"ServiceMonitor/frontdoor", "Service/vllm-headless", "PodDisruptionBudget/frontdoor", "Service/frontdoor", "Secret/frontdoor-secrets"} {
			if kinds[want] == nil {
				t.Fatalf("%s missing from the overlay's output", want)
			}
		}
		if hs := kinds["Service/vllm-headless"].(*corev1.Service); hs.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Fatal("vllm-headless is not headless")
		}
		sec := kinds["Secret/frontdoor-secrets"].(*corev1.Secret)
		if got := string(sec.Data["FRONTDOOR_ADMIN_TOKEN"]); got != token {
			t.Fatalf("the generated Secret's FRONTDOOR_ADMIN_TOKEN is %q, not secrets.env's", got)
		}
	}
}

// deploy/compose.yaml loads with the Compose spec's own loader, has the
// whole stack, and every file it names exists. It refuses to start
// without an admin token or a Grafana password, and passes the ones it is
// given.
func TestComposeFileLoads(t *testing.T) {
	load := func(env []string) (*types.Project, error) {
		opts, err := cli.NewProjectOptions([]string{"compose.yaml"}, cli.WithWorkingDirectory("."), cli.WithEnv(env), cli.WithResolvedPaths(true))
		if err != nil {
			t.Fatal(err)
		}
		return opts.LoadProject(context.Background())
	}
	const token, grafanaPassword = "3f6c0b9a7e2d41c58b1f0e9d2a7c6b5e", "Qm9vdHN0cmFwLWdyYWZhbmEtcHc"
	if _, err := load([]string{"GRAFANA_ADMIN_PASSWORD=" + grafanaPassword}); err == nil || !strings.Contains(err.Error(), "FRONTDOOR_ADMIN_TOKEN") {
		t.Fatalf("compose without FRONTDOOR_ADMIN_TOKEN: %v, want an error naming it", err)
	}
	if _, err := load([]string{"FRONTDOOR_ADMIN_TOKEN=" + token}); err == nil || !strings.Contains(err.Error(), "GRAFANA_ADMIN_PASSWORD") {
		t.Fatalf("compose without GRAFANA_ADMIN_PASSWORD: %v, want an error naming it", err)
	}
	p, err := load([]string{"FRONTDOOR_ADMIN_TOKEN=" + token, "GRAFANA_ADMIN_PASSWORD=" + grafanaPassword})
	if err != nil {
		t.Fatalf("compose: %v", err)
	}
	for _, name := range []string{"frontdoor-1", "frontdoor-2"} {
		s, _ := p.GetService(name)
		if v := s.Environment["FRONTDOOR_ADMIN_TOKEN"]; v == nil || *v != token {
			t.Fatalf("%s: FRONTDOOR_ADMIN_TOKEN is %v, not the one given", name, v)
		}
	}
	for _, name := range []string{"lb", "frontdoor-1", "frontdoor-2", "redis", "vllm-a", "vllm-b", "dashscope", "prometheus", "grafana"} {
		if _, err := p.GetService(name); err != nil {
			t.Fatalf("service %s: %v", name, err)
		}
	}
	checkComposeMonitoringPrivate(t, p, grafanaPassword)
	if s, _ := p.GetService("redis"); !strings.HasPrefix(s.Image, "redis/redis-stack-server:") {
		t.Fatalf("redis image %q is not Redis Stack", s.Image)
	}
	named := 0
	for _, s := range p.Services {
		if s.Build != nil {
			for _, f := range []string{s.Build.Context, filepath.Join(s.Build.Context, s.Build.Dockerfile)} {
				if _, err := os.Stat(f); err != nil {
					t.Fatalf("service %s: build file: %v", s.Name, err)
				}
				named++
			}
		}
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				t.Fatalf("service %s: mounted file: %v", s.Name, err)
			}
			named++
		}
		for _, f := range s.EnvFiles {
			if _, err := os.Stat(f.Path); err != nil && f.Required {
				t.Fatalf("service %s: env file: %v", s.Name, err)
			}
		}
	}
	if named < 10 {
		t.Fatalf("only %d files named", named)
	}
	b, err := os.ReadFile("compose/frontdoor.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := checkFrontdoorConfig(t, "compose/frontdoor.yaml", string(b))
	if cfg.Cache.Backend != "redis" || cfg.Admission.Backend != "redis" || !cfg.Spillover.Enabled {
		t.Fatal("the Compose config does not share Redis or spill over")
	}
	fd, _ := p.GetService("frontdoor-1")
	if !fd.ReadOnly || fd.StopGracePeriod == nil || fd.User == "" {
		t.Fatal("frontdoor-1: not read-only, non-root, with a stop grace period")
	}
}

// checkComposeMonitoringPrivate holds the Compose stack's Prometheus (no
// authentication of its own) and Grafana to this machine: every port they
// publish is bound to loopback, and Grafana asks everyone to sign in (no
// anonymous or proxy access, no sign-up) as admin with the password given.
func checkComposeMonitoringPrivate(t *testing.T, p *types.Project, grafanaPassword string) {
	t.Helper()
	for _, name := range []string{"prometheus", "grafana"} {
		s, _ := p.GetService(name)
		if len(s.Ports) == 0 {
			t.Errorf("%s publishes no port", name)
		}
		for _, port := range s.Ports {
			if ip, err := netip.ParseAddr(port.HostIP); err != nil || !ip.IsLoopback() {
				t.Errorf("%s publishes %s on %q, not on loopback", name, port.Published, port.HostIP)
			}
		}
	}
	g, _ := p.GetService("grafana")
	env := func(k string) string {
		if v := g.Environment[k]; v != nil {
			return *v
		}
		return ""
	}
	for _, k := range []string{"GF_AUTH_ANONYMOUS_ENABLED", "GF_AUTH_DISABLE_LOGIN_FORM", "GF_AUTH_PROXY_ENABLED", "GF_USERS_ALLOW_SIGN_UP"} {
		if on, _ := strconv.ParseBool(env(k)); on {
			t.Errorf("grafana: %s=%s", k, env(k))
		}
	}
	if env("GF_AUTH_ANONYMOUS_ENABLED") == "" {
		t.Error("grafana: GF_AUTH_ANONYMOUS_ENABLED is not set to false")
	}
	if env("GF_SECURITY_ADMIN_PASSWORD") != grafanaPassword {
		t.Errorf("grafana: GF_SECURITY_ADMIN_PASSWORD is %q, not GRAFANA_ADMIN_PASSWORD", env("GF_SECURITY_ADMIN_PASSWORD"))
	}
	// Nothing mounted into Grafana turns anonymous access back on.
	for _, v := range g.Volumes {
		b, err := os.ReadFile(v.Source)
		if err == nil && regexp.MustCompile(`(?i)anonymous`).Match(b) {
			t.Errorf("grafana: %s mentions anonymous access", v.Source)
		}
	}
}

// dockerfileBuild returns the Dockerfile's RUN line that builds
// cmd/frontdoor.
func dockerfileBuild(t *testing.T) (string, string) {
	t.Helper()
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	var build string
	for _, l := range strings.Split(df, "\n") {
		if strings.HasPrefix(l, "RUN ") && strings.Contains(l, "go build") && strings.HasSuffix(l, "./cmd/frontdoor") {
			build = strings.TrimPrefix(l, "RUN ")
		}
	}
	if build == "" {
		t.Fatal("no RUN ... go build ... ./cmd/frontdoor line in the Dockerfile")
	}
	return df, build
}

// The Dockerfile's exact build command builds a static binary that
// carries the version, checks the configs shipped here, and answers the
// health check the image uses.
func TestDockerfileBuildCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	df, build := dockerfileBuild(t)
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "buildinfo.version=${VERSION}"} {
		if !strings.Contains(build, want) {
			t.Fatalf("the build command lacks %s: %s", want, build)
		}
	}
	// The base images are build arguments whose defaults are the public ones.
	for _, re := range []string{`(?m)^ARG BUILD_IMAGE=golang:\$\{GO_VERSION\}-bookworm$`, `(?m)^FROM \$\{BUILD_IMAGE\} AS build$`,
		`(?m)^ARG RUNTIME_IMAGE=gcr\.io/distroless/static\S*:nonroot$`, `(?m)^FROM \$\{RUNTIME_IMAGE\} AS frontdoor$`, `(?m)^USER nonroot:nonroot$`,
		`(?m)^EXPOSE 8080$`, `(?m)^HEALTHCHECK .*CMD \["/frontdoor", "healthcheck"`, `(?m)^ARG VERSION=`} {
		if !regexp.MustCompile(re).MatchString(df) {
			t.Fatalf("Dockerfile: no line matching %s", re)
		}
	}
	if last := regexp.MustCompile(`(?m)^FROM .*$`).FindAllString(df, -1); !strings.HasSuffix(last[len(last)-1], "AS frontdoor") {
		t.Fatal("the last stage (the default target) is not the frontdoor image")
	}
	if _, err := os.Stat("../.dockerignore"); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(t.TempDir(), "frontdoor")
	cmd := exec.Command("sh", "-c", strings.ReplaceAll(build, "/out/frontdoor", out))
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "VERSION=v9.9.9-test")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("the binary is dynamically linked")
		}
	}
	f.Close()
	if b, err := exec.Command(out, "version").Output(); err != nil || !strings.HasPrefix(strings.TrimSpace(string(b)), "frontdoor v9.9.9-test") {
		t.Fatalf("version: %q %v", b, err)
	}

	// check-config, the CLI, on every config shipped in deploy/.
	configs := map[string]string{}
	for _, p := range []string{"k8s/base/configmap.yaml", "k8s/overlays/example/config.yaml"} {
		b, _ := os.ReadFile(p)
		obj, err := decodeStrict(b)
		if err != nil {
			t.Fatal(err)
		}
		configs[p] = obj.(*corev1.ConfigMap).Data["frontdoor.yaml"]
	}
	b, _ := os.ReadFile("compose/frontdoor.yaml")
	configs["compose/frontdoor.yaml"] = string(b)
	for name, c := range configs {
		path := filepath.Join(t.TempDir(), "c.yaml")
		_ = os.WriteFile(path, []byte(c), 0o600)
		if b, err := exec.Command(out, "check-config", "--config", path).CombinedOutput(); err != nil {
			t.Fatalf("check-config %s: %v\n%s", name, err, b)
		}
	}

	// The image's health check: 0 on 200, 1 otherwise.
	var status atomic.Int32
	status.Store(200)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(int(status.Load())) }))
	defer srv.Close()
	if err := exec.Command(out, "healthcheck", "--url", srv.URL+"/healthz").Run(); err != nil {
		t.Fatalf("healthcheck on 200: %v", err)
	}
	status.Store(503)
	if err := exec.Command(out, "healthcheck", "--url", srv.URL+"/healthz").Run(); err == nil {
		t.Fatal("healthcheck passed on 503")
	}
}

// The tests' heavy dependencies (Kubernetes types, kustomize, the Compose
// loader, the DNS server) do not enter the shipped binary.
func TestDeployDependenciesStayOutOfTheBinary(t *testing.T) {
	b, err := exec.Command("go", "list", "-deps", "../cmd/frontdoor").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range strings.Fields(string(b)) {
		for _, banned := range []string{"k8s.io/", "sigs.k8s.io/", "github.com/compose-spec/", "github.com/miekg/dns", "github.com/prometheus-operator/"} {
			if strings.HasPrefix(dep, banned) {
				t.Fatalf("cmd/frontdoor depends on %s", dep)
			}
		}
	}
}

// The base Deployment fits the image: the user of the Dockerfile's
// USER nonroot (65532), a read-only root filesystem, the config mounted
// where the image's CMD reads it, and probes on paths and the port the
// binary serves.
func TestK8sDeploymentMatchesImage(t *testing.T) {
	df, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	image := string(df[bytes.LastIndex(df, []byte("\nFROM ")):]) // the frontdoor stage
	if !regexp.MustCompile(`(?m)^USER nonroot:nonroot$`).MatchString(image) {
		t.Fatal("the image's USER is not nonroot:nonroot (distroless's 65532)")
	}
	var cmd []string
	if m := regexp.MustCompile(`(?m)^CMD (\[.*\])$`).FindStringSubmatch(image); m == nil || json.Unmarshal([]byte(m[1]), &cmd) != nil {
		t.Fatal("the image has no CMD in exec form")
	}
	m := regexp.MustCompile(`(?m)^EXPOSE (\d+)$`).FindStringSubmatch(image)
	if m == nil {
		t.Fatal("the image EXPOSEs no port")
	}
	port, _ := strconv.Atoi(m[1])
	configPath := ""
	for i, a := range cmd {
		if a == "--config" && i+1 < len(cmd) {
			configPath = cmd[i+1]
		}
	}
	if configPath == "" {
		t.Fatalf("the image's CMD %q names no --config", cmd)
	}

	b, err := os.ReadFile("k8s/base/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	obj, err := decodeStrict(b)
	if err != nil {
		t.Fatal(err)
	}
	pod := obj.(*appsv1.Deployment).Spec.Template.Spec
	c := pod.Containers[0]
	psc, csc := pod.SecurityContext, c.SecurityContext
	if psc == nil || csc == nil || psc.RunAsUser == nil || *psc.RunAsUser != 65532 || psc.RunAsGroup == nil || *psc.RunAsGroup != 65532 ||
		psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("the pod does not run as the image's user 65532:65532, non-root: %+v", psc)
	}
	if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem ||
		csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		t.Errorf("the container's root filesystem is not read-only, or it may escalate: %+v", csc)
	}
	if !slices.Equal(c.Args, cmd) {
		t.Errorf("the container's args %q differ from the image's CMD %q", c.Args, cmd)
	}

	// The config file: a read-only mount of the ConfigMap's key at the path.
	var mount *corev1.VolumeMount
	for i, vm := range c.VolumeMounts {
		if strings.HasPrefix(configPath, strings.TrimSuffix(vm.MountPath, "/")+"/") {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil || !mount.ReadOnly {
		t.Fatalf("no read-only volume mount holds %s: %+v", configPath, c.VolumeMounts)
	}
	key := strings.TrimPrefix(configPath, strings.TrimSuffix(mount.MountPath, "/")+"/")
	var cmName string
	for _, v := range pod.Volumes {
		if v.Name == mount.Name && v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	b, err = os.ReadFile("k8s/base/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cmObj, err := decodeStrict(b)
	if err != nil {
		t.Fatal(err)
	}
	cm := cmObj.(*corev1.ConfigMap)
	if cm.Name != cmName || cm.Data[key] == "" {
		t.Fatalf("volume %s: ConfigMap %q with key %q, want %s's %s", mount.Name, cmName, key, cm.Name, key)
	}
	cfg := checkFrontdoorConfig(t, "k8s/base/configmap.yaml", cm.Data[key])

	// The port: the image's, the config's listener's, and the probes'.
	var hp *corev1.ContainerPort
	for i, p := range c.Ports {
		if p.Name == "http" {
			hp = &c.Ports[i]
		}
	}
	if hp == nil || int(hp.ContainerPort) != port || !strings.HasSuffix(cfg.Listen, ":"+strconv.Itoa(port)) {
		t.Fatalf("ports: container %+v, image EXPOSE %d, config listen %q", hp, port, cfg.Listen)
	}

	// The probes' paths, asked of a running gateway.
	gcfg := router.DefaultConfig()
	gcfg.Listen = "127.0.0.1:0"
	gcfg.Logging.AccessLog = false
	gcfg.Balancer.HealthInterval = 3600e9
	gcfg.Nodes = []balancer.NodeConfig{{Name: "gpu", URL: "http://127.0.0.1:1", Kind: "vllm", Models: []string{"m"}, MaxConcurrency: 1, Weight: 1}}
	gw, err := router.New(gcfg, router.Deps{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gw.Serve(ln) }()
	t.Cleanup(func() { _ = gw.Shutdown(context.Background()) })
	probes := map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe}
	for name, p := range probes {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s probe: not an HTTP GET", name)
			continue
		}
		if p.HTTPGet.Port.String() != hp.Name && p.HTTPGet.Port.IntValue() != port {
			t.Errorf("%s probe: port %s, not the container's %s (%d)", name, p.HTTPGet.Port.String(), hp.Name, port)
		}
		resp, err := httpGet("http://" + ln.Addr().String() + p.HTTPGet.Path)
		if err != nil {
			t.Fatal(err)
		}
		// /readyz is 503 here (the node is down), not 404.
		if ok := resp.StatusCode == 200 || (name == "readiness" && resp.StatusCode == 503); !ok {
			t.Errorf("%s probe: GET %s: %s", name, p.HTTPGet.Path, resp.Status)
		}
	}
}

func httpGet(url string) (*http.Response, error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return resp, nil
}
