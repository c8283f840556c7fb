package deploy_test

// The containers for real: TestE2E builds the images from deploy/Dockerfile
// and runs the stack of deploy/compose.yaml in Docker. It runs only when
// FRONTDOOR_E2E is set (`make e2e`), and skips, saying why, where Docker
// cannot run (FRONTDOOR_E2E=require fails instead).
//
// There is no image registry here, so the public base images are replaced,
// through the Dockerfile's build arguments and deploy/e2e/compose.override.yaml,
// by local stand-ins built from a debootstrap'd Debian bookworm: the Go
// toolchain image, a distroless-like runtime (CA certificates, user 65532),
// nginx and Redis with RediSearch 2.6. They are tagged frontdoor-local/* and
// rebuilt only when absent or when their recipe changes.

import (
	"bufio"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"frontdoor/internal/testenv"
)

const (
	e2eProject   = "frontdoor-e2e"
	recipeLabel  = "frontdoor.e2e.recipe"
	debianImage  = "frontdoor-local/debian:bookworm"
	runtimeImage = "frontdoor-local/distroless-static:nonroot"
	nginxImage   = "frontdoor-local/nginx:bookworm"
	redisImage   = "frontdoor-local/redis-stack-server:7.0-redisearch2.6.37"
	nonroot      = 65532
	maxImageSize = 30 << 20 // compressed, as a registry stores and a pull transfers it
)

// The services of compose.yaml the test starts; the others have no local
// stand-in and are named in the output.
var e2eServices = []string{"lb", "frontdoor-1", "frontdoor-2", "redis", "vllm-a", "vllm-b", "dashscope"}

type e2e struct {
	t         *testing.T
	docker    string
	compose   []string // the Compose command and its project arguments
	root      string   // the repository
	deployDir string
}

func TestE2E(t *testing.T) {
	if os.Getenv("FRONTDOOR_E2E") == "" {
		t.Skip("set FRONTDOOR_E2E=1 (make e2e) to build the images and run the Compose stack in Docker")
	}
	e := newE2E(t)
	start := time.Now()
	buildImage := e.standins()
	t.Logf("stand-in base images ready in %s", time.Since(start).Round(time.Second))

	version := "e2e"
	if b, err := exec.Command("git", "-C", e.root, "describe", "--tags", "--always", "--dirty").Output(); err == nil {
		version = strings.TrimSpace(string(b))
	}
	// As docs/deploy.md builds them, with the base images swapped.
	start = time.Now()
	bases := []string{"--build-arg", "BUILD_IMAGE=" + buildImage, "--build-arg", "RUNTIME_IMAGE=" + runtimeImage}
	e.dockerBuild(e.root, append([]string{"-f", "deploy/Dockerfile", "--build-arg", "VERSION=" + version, "-t", "frontdoor:e2e"}, bases...)...)
	// VERSION too, so that the build stage comes from the cache.
	e.dockerBuild(e.root, append([]string{"-f", "deploy/Dockerfile", "--target", "gpusim", "--build-arg", "VERSION=" + version, "-t", "frontdoor-gpusim:e2e"}, bases...)...)
	t.Logf("frontdoor:e2e and frontdoor-gpusim:e2e built in %s (version %s)", time.Since(start).Round(time.Second), version)

	t.Run("image", func(t *testing.T) { e.checkImage(t, version) })
	t.Run("compose", e.checkCompose)
}

func newE2E(t *testing.T) *e2e {
	missing := t.Skipf
	if os.Getenv("FRONTDOOR_E2E") == "require" {
		missing = t.Fatalf
	}
	e := &e2e{t: t, docker: "docker"}
	if _, err := os.Stat("/usr/bin/docker"); err == nil {
		e.docker = "/usr/bin/docker" // Debian's, matching its daemon
	}
	if out, err := exec.Command(e.docker, "info").CombinedOutput(); err != nil {
		why := err.Error()
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "Cannot connect") || strings.Contains(l, "ERROR") || strings.Contains(l, "denied") {
				why = strings.TrimSpace(l)
			}
		}
		missing("Docker cannot run here (docker info: %s); make e2e installs docker.io and starts dockerd as root", why)
	}
	var err error
	if e.deployDir, err = filepath.Abs("."); err != nil {
		t.Fatal(err)
	}
	e.root = filepath.Dir(e.deployDir)

	// Debian's docker-compose 1.29 predates the top-level `name`: it gets
	// compose.yaml without that line, and the project name by -p.
	file := filepath.Join(e.deployDir, "compose.yaml")
	switch {
	case exec.Command(e.docker, "compose", "version").Run() == nil:
		e.compose = []string{e.docker, "compose"}
	case exec.Command("docker-compose", "version").Run() == nil:
		e.compose = []string{"docker-compose"}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		v1 := regexp.MustCompile(`(?m)^name: frontdoor\n`).ReplaceAll(b, nil)
		if len(v1) == len(b) {
			t.Fatal("compose.yaml has no top-level `name: frontdoor` line")
		}
		file = filepath.Join(t.TempDir(), "compose.yaml")
		if err := os.WriteFile(file, v1, 0o644); err != nil {
			t.Fatal(err)
		}
	default:
		missing("no Compose (`docker compose` or docker-compose); make e2e installs Debian's docker-compose")
	}
	e.compose = append(e.compose, "--project-directory", e.deployDir, "-p", e2eProject,
		"-f", file, "-f", filepath.Join(e.deployDir, "e2e", "compose.override.yaml"))
	return e
}

// run runs a command and returns its combined output.
func run(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (e *e2e) dockerOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := run("", nil, e.docker, args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// dockerBuild builds with the classic builder: BuildKit would fetch the
// Dockerfile's `# syntax` frontend from a registry.
func (e *e2e) dockerBuild(dir string, args ...string) {
	e.t.Helper()
	if _, err := run(dir, []string{"DOCKER_BUILDKIT=0"}, e.docker, append([]string{"build", "-q"}, append(args, ".")...)...); err != nil {
		e.t.Fatal(err)
	}
}

// ensure builds tag with build unless it exists with the recipe's hash as
// its label.
func (e *e2e) ensure(tag string, recipe []string, build func(label string)) {
	e.t.Helper()
	h := sha256.Sum256([]byte(strings.Join(recipe, "\x00")))
	want := hex.EncodeToString(h[:8])
	got, _ := run("", nil, e.docker, "image", "inspect", "-f", `{{index .Config.Labels "`+recipeLabel+`"}}`, tag)
	if strings.TrimSpace(got) == want {
		return
	}
	start := time.Now()
	build(recipeLabel + "=" + want)
	e.t.Logf("built stand-in %s in %s", tag, time.Since(start).Round(time.Second))
}

func (e *e2e) imageID(tag string) string {
	return e.dockerOut(e.t, "image", "inspect", "-f", "{{.Id}}", tag)
}

// standins makes the local base images and returns the Go build image's tag.
func (e *e2e) standins() string {
	t := e.t
	dir := filepath.Join(e.deployDir, "e2e")
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	// Debian bookworm (minbase) from debootstrap, trusting this machine's
	// local CAs (/usr/local/share/ca-certificates) as a build here must.
	mirror := os.Getenv("FRONTDOOR_DEBIAN_MIRROR")
	if mirror == "" {
		mirror = "http://deb.debian.org/debian"
	}
	cas, _ := filepath.Glob("/usr/local/share/ca-certificates/*.crt")
	recipe := []string{"debootstrap --variant=minbase --include=ca-certificates bookworm", mirror}
	for _, ca := range cas {
		b, err := os.ReadFile(ca)
		if err != nil {
			t.Fatal(err)
		}
		recipe = append(recipe, string(b))
	}
	e.ensure(debianImage, recipe, func(label string) {
		if _, err := exec.LookPath("debootstrap"); err != nil {
			t.Fatalf("the stand-in images need debootstrap (apt-get install -y debootstrap; make e2e does): %v", err)
		}
		rootfs := filepath.Join(t.TempDir(), "rootfs")
		script := `set -e
debootstrap --variant=minbase --include=ca-certificates bookworm "$1" "$2" >/dev/null
for ca in /usr/local/share/ca-certificates/*.crt; do [ -f "$ca" ] && cp "$ca" "$1/usr/local/share/ca-certificates/"; done
chroot "$1" update-ca-certificates >/dev/null
rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*
tar -C "$1" -c . | "$3" import -c "LABEL $4" -c 'CMD ["/bin/bash"]' - "$5" >/dev/null`
		if _, err := run("", nil, "sh", "-c", script, "sh", rootfs, mirror, e.docker, label, debianImage); err != nil {
			t.Fatalf("debian stand-in: %v", err)
		}
	})
	debianID := e.imageID(debianImage)
	derived := func(tag, dockerfile, context string, extra ...string) {
		df := filepath.Join(dir, dockerfile)
		e.ensure(tag, append([]string{read(dockerfile), debianID}, extra...), func(label string) {
			e.dockerBuild(context, "--build-arg", "DEBIAN_IMAGE="+debianImage, "--label", label, "-f", df, "-t", tag)
		})
	}

	// golang:<version>-bookworm: this machine's Go.
	goenv, err := run("", nil, "go", "env", "GOROOT", "GOVERSION")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(goenv)
	goroot, gover := f[0], strings.TrimPrefix(f[1], "go")
	minor := regexp.MustCompile(`^\d+\.\d+`).FindString(gover)
	buildImage := "frontdoor-local/golang:" + minor + "-bookworm"
	derived(buildImage, "golang.Dockerfile", goroot, gover)
	derived(runtimeImage, "runtime.Dockerfile", dir)
	derived(nginxImage, "nginx.Dockerfile", dir)
	e.ensure(redisImage, []string{read("redis.Dockerfile"), debianID, "redisearch-2.6.37"}, func(label string) {
		ctx := t.TempDir()
		b, err := os.ReadFile(testenv.RediSearchModule(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ctx, "redisearch.so"), b, 0o755); err != nil {
			t.Fatal(err)
		}
		e.dockerBuild(ctx, "--build-arg", "DEBIAN_IMAGE="+debianImage, "--label", label, "-f", filepath.Join(dir, "redis.Dockerfile"), "-t", redisImage)
	})
	return buildImage
}

// checkImage: the image alone, as `docker run --read-only` starts it.
func (e *e2e) checkImage(t *testing.T, version string) {
	size, err := strconv.ParseInt(e.dockerOut(t, "image", "inspect", "-f", "{{.Size}}", "frontdoor:e2e"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	compressed := e.savedSize(t, "frontdoor:e2e")
	t.Logf("frontdoor:e2e is %.1f MB, %.1f MB compressed (docker save | gzip)", float64(size)/1e6, float64(compressed)/1e6)
	if compressed >= maxImageSize {
		t.Errorf("the image is %d bytes compressed, over %d", compressed, maxImageSize)
	}

	if out := e.dockerOut(t, "run", "--rm", "--read-only", "frontdoor:e2e", "version"); !strings.HasPrefix(out, "frontdoor "+version+" ") {
		t.Errorf("frontdoor version in the image: %q, want the build's version %s", out, version)
	}

	name := e2eProject + "-image"
	_, _ = run("", nil, e.docker, "rm", "-f", name)
	id := e.dockerOut(t, "run", "-d", "--read-only", "--name", name, "frontdoor:e2e")
	t.Cleanup(func() { _, _ = run("", nil, e.docker, "rm", "-f", id) })
	e.waitHealthy(t, id)
	e.checkProcess(t, id)
}

// savedSize is the size of the image as docker save writes it, gzipped.
func (e *e2e) savedSize(t *testing.T, image string) int64 {
	cmd := exec.Command(e.docker, "save", image)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var n countWriter
	zw, _ := gzip.NewWriterLevel(&n, gzip.BestSpeed)
	if _, err := io.Copy(zw, out); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(zw.Close(), cmd.Wait()); err != nil {
		t.Fatalf("docker save %s: %v", image, err)
	}
	return int64(n)
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

// waitHealthy waits for the container's HEALTHCHECK to pass.
func (e *e2e) waitHealthy(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := e.dockerOut(t, "inspect", "-f", "{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}no-healthcheck{{end}}", id)
		if st == "running healthy" {
			return
		}
		if time.Now().After(deadline) || !strings.HasPrefix(st, "running") {
			logs, _ := run("", nil, e.docker, "inspect", "-f", "{{json .State.Health}}", id)
			t.Fatalf("container %.12s is %q, not healthy within 60s: %s", id, st, logs)
		}
		time.Sleep(time.Second)
	}
}

// checkProcess: the container's process runs as 65532 on a read-only root
// filesystem, as the kernel sees it (not as the configuration says).
func (e *e2e) checkProcess(t *testing.T, id string) {
	t.Helper()
	pid := e.dockerOut(t, "inspect", "-f", "{{.State.Pid}}", id)
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatalf("the container's process: %v", err)
	}
	uid := regexp.MustCompile(`(?m)^Uid:\s+(\d+)\s+(\d+)`).FindSubmatch(status)
	gid := regexp.MustCompile(`(?m)^Gid:\s+(\d+)\s+(\d+)`).FindSubmatch(status)
	if uid == nil || gid == nil {
		t.Fatalf("no Uid/Gid in /proc/%s/status", pid)
	}
	if string(uid[2]) != strconv.Itoa(nonroot) || string(gid[2]) != strconv.Itoa(nonroot) {
		t.Errorf("container %.12s runs as uid %s gid %s, want %d", id, uid[2], gid[2], nonroot)
	}
	mounts, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	root := ""
	for _, l := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) > 5 && f[4] == "/" {
			root = f[5]
		}
	}
	if !slices.Contains(strings.Split(root, ","), "ro") {
		t.Errorf("container %.12s: the root filesystem is mounted %q, not read-only", id, root)
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// checkCompose runs the stack and checks it through nginx and each replica.
func (e *e2e) checkCompose(t *testing.T) {
	_ = e.dockerOut(t, "tag", "frontdoor:e2e", "frontdoor:compose")
	_ = e.dockerOut(t, "tag", "frontdoor-gpusim:e2e", "frontdoor-gpusim:compose")
	lbPort := freePort(t)
	env := []string{"FRONTDOOR_ADMIN_TOKEN=" + randomHex(32), "GRAFANA_ADMIN_PASSWORD=" + randomHex(16), fmt.Sprintf("FRONTDOOR_PORT=127.0.0.1:%d", lbPort)}
	compose := func(args ...string) (string, error) {
		return run(e.deployDir, env, e.compose[0], append(slices.Clone(e.compose[1:]), args...)...)
	}
	mustCompose := func(args ...string) string {
		t.Helper()
		out, err := compose(args...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}

	all := strings.Fields(mustCompose("config", "--services"))
	var left []string
	for _, s := range all {
		if !slices.Contains(e2eServices, s) {
			left = append(left, s)
		}
	}
	t.Logf("services not started (no local stand-in for their images): %s", strings.Join(left, ", "))

	_, _ = compose("down", "-v", "--remove-orphans")
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := compose("logs", "--no-color", "--tail", "30")
			t.Logf("compose logs:\n%s", logs)
		}
		if _, err := compose("down", "-v", "--remove-orphans"); err != nil {
			t.Log(err)
		}
	})
	start := time.Now()
	mustCompose(append([]string{"up", "-d", "--no-build"}, e2eServices...)...)
	ids := map[string]string{}
	for _, s := range e2eServices {
		ids[s] = mustCompose("ps", "-q", s)
	}
	replicas := []string{"frontdoor-1", "frontdoor-2"}
	direct := map[string]string{}
	for _, r := range replicas {
		e.waitHealthy(t, ids[r])
		e.checkProcess(t, ids[r])
		hp := strings.TrimSpace(mustCompose("port", r, "8080"))
		direct[r] = "http://" + hp
	}
	t.Logf("stack up, both replicas healthy, in %s", time.Since(start).Round(time.Second))
	lb := fmt.Sprintf("http://127.0.0.1:%d", lbPort)

	// A question through nginx is answered by a replica and stored in the
	// shared Redis; the other replica, asked directly, serves it from there.
	q := "Where is the front door? " + randomHex(4)
	reqID := "e2e-" + randomHex(6)
	var resp *http.Response
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		resp, err = chat(lb, q, reqID, false)
		if err == nil && resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("chat through nginx: %v %v", err, resp)
		}
		if resp != nil {
			resp.Body.Close()
		}
		time.Sleep(500 * time.Millisecond)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if c := resp.Header.Get("X-Cache"); c != "miss" || !strings.Contains(string(body), `"chat.completion"`) {
		t.Fatalf("chat through nginx: X-Cache %q, body %s", c, body)
	}
	served := e.servedBy(t, ids, replicas, reqID)
	other := replicas[0]
	if served == other {
		other = replicas[1]
	}
	resp, err := chat(direct[other], q, "", false)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if c := resp.Header.Get("X-Cache"); resp.StatusCode != http.StatusOK || c != "hit-exact" {
		t.Errorf("the same question on %s (the first was answered by %s): %s, X-Cache %q, want hit-exact from the shared cache", other, served, resp.Status, c)
	}
	t.Logf("%s answered through nginx (miss), %s served it from the shared Redis (hit-exact)", served, other)

	e.checkDrain(t, ids, direct, lb, q)
}

// chat sends a chat completion; id, when set, is its X-Request-Id.
func chat(base, content, id string, stream bool) (*http.Response, error) {
	body := fmt.Sprintf(`{"model":"qwen3-8b","stream":%t,"messages":[{"role":"user","content":%q}]}`, stream, content)
	req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if id != "" {
		req.Header.Set("X-Request-Id", id)
	}
	c := &http.Client{Timeout: 15 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("chat on %s: %w", base, err)
	}
	return resp, nil
}

// servedBy finds the replica whose access log has the request.
func (e *e2e) servedBy(t *testing.T, ids map[string]string, replicas []string, reqID string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, r := range replicas {
			logs, _ := run("", nil, e.docker, "logs", ids[r])
			if strings.Contains(logs, `"request_id":"`+reqID+`"`) {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("request %s is in no replica's access log", reqID)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkDrain: `docker stop` on frontdoor-1 during a stream lets the stream
// finish with [DONE]; the process exits by itself on SIGTERM (well before
// stop_grace_period), nginx answers every request meanwhile, and once it
// has stopped the other replica answers them all.
func (e *e2e) checkDrain(t *testing.T, ids, direct map[string]string, lb, cached string) {
	const victim, survivor = "frontdoor-1", "frontdoor-2"
	resp, err := chat(direct[victim], "Tell me a long story "+randomHex(4), "", true)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream on %s: %s", victim, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() {
		t.Fatalf("stream on %s: no first line: %v", victim, sc.Err())
	}

	type stopped struct {
		took time.Duration
		err  error
	}
	done := make(chan stopped, 1)
	start := time.Now()
	go func() {
		_, err := run("", nil, e.docker, "stop", ids[victim])
		done <- stopped{time.Since(start), err}
	}()
	// Meanwhile, through nginx, the cached question (answered at once by
	// either replica): every request answered.
	type result struct {
		n    int
		errs []string
	}
	during := make(chan result, 1)
	stopLoad := make(chan struct{})
	go func() {
		var r result
		for {
			select {
			case <-stopLoad:
				during <- r
				return
			case <-time.After(50 * time.Millisecond):
			}
			r.n++
			resp, err := chat(lb, cached, "", false)
			if err != nil {
				r.errs = append(r.errs, err.Error())
				continue
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				r.errs = append(r.errs, resp.Status)
			}
		}
	}()

	var last string
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			last = l
		}
	}
	if last != "data: [DONE]" {
		t.Errorf("the stream on %s while it stopped ended with %q (%v), not data: [DONE]", victim, last, sc.Err())
	}
	t.Logf("the stream on %s finished %s after docker stop", victim, time.Since(start).Round(10*time.Millisecond))

	st := <-done
	close(stopLoad)
	load := <-during
	if len(load.errs) > 0 {
		t.Errorf("through nginx while %s stopped: %d of %d requests failed: %s", victim, len(load.errs), load.n, strings.Join(load.errs, "; "))
	}
	if st.err != nil {
		t.Fatal(st.err)
	}
	grace := e.dockerOut(t, "inspect", "-f", "{{if .Config.StopTimeout}}{{.Config.StopTimeout}}{{else}}unset (10){{end}}", ids[victim])
	code := e.dockerOut(t, "inspect", "-f", "{{.State.ExitCode}}", ids[victim])
	t.Logf("docker stop %s took %s (stop timeout %ss), exit code %s; %d requests through nginx meanwhile", victim,
		st.took.Round(10*time.Millisecond), grace, code, load.n)
	if g, _ := strconv.Atoi(grace); g < 35 || st.took >= time.Duration(g)*time.Second/2 || code != "0" {
		t.Errorf("%s on SIGTERM: stopped in %s with exit code %s and stop timeout %ss; want it to exit 0 by itself, well within a stop timeout covering drain_delay and grace (35s+)",
			victim, st.took, code, grace)
	}

	var slowest time.Duration
	for i := range 6 {
		id := fmt.Sprintf("e2e-after-%d-%s", i, randomHex(4))
		t0 := time.Now()
		resp, err := chat(lb, "After the stop "+randomHex(4), id, false)
		slowest = max(slowest, time.Since(t0))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("through nginx after %s stopped: %s", victim, resp.Status)
		}
		if r := e.servedBy(t, ids, []string{victim, survivor}, id); r != survivor {
			t.Errorf("request %s after the stop was served by %s", id, r)
		}
	}
	t.Logf("after the stop, 6 requests through nginx went to %s (slowest %s)", survivor, slowest.Round(10*time.Millisecond))
}
