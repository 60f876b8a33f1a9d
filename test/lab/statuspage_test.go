package lab

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// statusPageShot is where TestStatusPage keeps its screenshot (bin/ is not tracked).
const statusPageShot = "../../bin/artifacts/statuspage.png"

// TestStatusPage opens the node's status page in a real headless browser (Debian's
// chromium) inside the node's namespace: every service of the lab is there, a backend
// whose server stopped shows as down and the others as up, and the page's own script
// has refreshed it (the browser's virtual time runs past the two-second refresh). The
// screenshot is kept for a person to look at.
func TestStatusPage(t *testing.T) {
	if _, err := hostprog.Chromium.Path(); err != nil {
		testenv.Missing(t, err)
	}
	health := &Health{Kind: "tcp", Port: 80, Interval: 200 * time.Millisecond, Timeout: 100 * time.Millisecond, Rise: 1, Fall: 2}
	tl := startLab(t, []string{"lb1"}, health)
	node := tl.nodes["lb1"]
	dead := tl.backends[1]
	if err := tl.nginx[dead.Role].Stop(); err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		addr := f.addr(dead).String()
		if _, err := node.WaitLog(10*time.Second, func(line string) bool {
			return strings.Contains(line, addr) && strings.Contains(strings.ToLower(line), "down")
		}); err != nil {
			t.Fatalf("%s: the node did not mark %s down: %v", f.name, addr, err)
		}
	}

	profile := t.TempDir()
	browser := func(args ...string) string {
		t.Helper()
		args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
			"--user-data-dir=" + profile, "--virtual-time-budget=5000", "--window-size=1280,1400"}, args...)
		out, err := tl.Host("lb1").Output(hostprog.Chromium, append(args, "http://127.0.0.1:9100/")...)
		if err != nil {
			t.Fatalf("chromium: %v", err)
		}
		return out
	}
	dom := browser("--dump-dom")

	for _, f := range families {
		for _, be := range tl.backends {
			addr := f.addr(be).String()
			m := regexp.MustCompile(`<tr class="([a-z]+)" data-backend="` + regexp.QuoteMeta(addr) + `"><td>[^<]*</td><td class="state">([a-z]+)</td>`).FindStringSubmatch(dom)
			want := "up"
			if be == dead {
				want = "down"
			}
			switch {
			case m == nil:
				t.Errorf("%s: the page has no row for backend %s (%s)", f.name, be.Role, addr)
			case m[1] != want || m[2] != want:
				t.Errorf("%s: backend %s (%s) shows as %s/%s, want %s", f.name, be.Role, addr, m[1], m[2], want)
			}
		}
	}
	for _, svc := range []string{"web-ipv4", "web-ipv6"} {
		if !strings.Contains(dom, `id="service-`+svc+`"`) {
			t.Errorf("the page lacks service %s", svc)
		}
	}
	if !regexp.MustCompile(`id="live">live · `).MatchString(dom) {
		t.Errorf("the page's script did not refresh it: %s", regexp.MustCompile(`<span id="live">[^<]*`).FindString(dom))
	}

	if err := os.MkdirAll(filepath.Dir(statusPageShot), 0o755); err != nil {
		t.Fatal(err)
	}
	shot, err := filepath.Abs(statusPageShot)
	if err != nil {
		t.Fatal(err)
	}
	browser("--screenshot=" + shot)
	png, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("no screenshot at %s: %v", shot, err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
}
