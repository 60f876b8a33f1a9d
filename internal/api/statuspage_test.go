package api

import (
	"html/template"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
)

// pageNode is a node with one service whose second backend failed its check.
type pageNode struct {
	Node // the methods the page does not call panic
	st   wire.Status
}

func (n pageNode) Status() wire.Status { return n.st }

func pageStatus(pps float64) wire.Status {
	return wire.Status{
		Node: "lb1", FlowTableSize: 1024, Drops: map[string]uint64{"fragment": 7, "truncated": 0},
		BGP: &wire.BGPStatus{ASN: 65001, RouterID: "10.0.0.11", Peers: []wire.PeerStatus{{Address: "10.0.0.1", ASN: 65000, State: "established", Up: true}}},
		Services: []wire.ServiceStatus{{
			Name: "web", VIP: "198.51.100.10", Port: 80, Protocol: "tcp", Forwarding: "ipip", Scheduler: "maglev", Announced: true,
			Backends: []wire.BackendStatus{
				{Address: "10.0.1.1", Weight: 1, State: wire.BackendUp, PacketsPerSecond: pps, Health: wire.BackendHealth{Check: "tcp://10.0.1.1:80", Up: true}},
				{Address: "10.0.1.2", Weight: 1, State: wire.BackendDown, Health: wire.BackendHealth{Check: "tcp://10.0.1.2:80", LastError: "connection <refused>"}},
			},
		}},
	}
}

// TestStatusPage renders the page and reads it the way a person would without
// JavaScript: a row per backend with its state, the failing check's reason (escaped),
// the drops, the peers, and a plot drawn from the recorded history.
func TestStatusPage(t *testing.T) {
	s := &Server{Node: pageNode{st: pageStatus(0)}, OpenReads: true, Log: slog.New(slog.DiscardHandler)}
	t0 := time.Unix(1_800_000_000, 0)
	for i, pps := range []float64{100, 400, 200} {
		s.history.record(t0.Add(time.Duration(i)*HistoryInterval), pageStatus(pps))
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:9100/", nil))
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	page := rec.Body.String()
	row := func(addr string) string {
		m := regexp.MustCompile(`(?s)<tr class="([a-z]+)" data-backend="` + regexp.QuoteMeta(addr) + `">(.*?)</tr>`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no row for backend %s:\n%s", addr, page)
		}
		return m[1] + " " + m[2]
	}
	if r := row("10.0.1.1"); !strings.HasPrefix(r, "up ") || !strings.Contains(r, `<td class="state">up</td>`) || !strings.Contains(r, "passing") {
		t.Errorf("healthy backend's row: %s", r)
	}
	r := row("10.0.1.2")
	if !strings.HasPrefix(r, "down ") || !strings.Contains(r, `<td class="state">down</td>`) || !strings.Contains(r, "failing</span>: connection &lt;refused&gt;") {
		t.Errorf("failed backend's row: %s", r)
	}
	// the plot of the history: three samples, peak 400/s, the last point at 200 (half height)
	if r := row("10.0.1.1"); !strings.Contains(r, "peak 400/s") || !strings.Contains(r, `points="0.0,20.0 80.0,2.0 160.0,14.0"`) {
		t.Errorf("plot of 100, 400, 200/s: %s", r)
	}
	for _, want := range []string{"<td>fragment</td><td class=\"num\">7</td>", "10.0.0.1", "established", "announced", "198.51.100.10:80/tcp"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if regexp.MustCompile(`(?i)(src|href)="https?:`).MatchString(page) {
		t.Error("the page fetches something from elsewhere")
	}
}

// TestHistoryWindow keeps HistoryLength of samples and no more; a backend that came
// later plots zero before it.
func TestHistoryWindow(t *testing.T) {
	var h history
	t0 := time.Unix(1_800_000_000, 0)
	n := int(HistoryLength/HistoryInterval) + 10
	for i := 0; i < n; i++ {
		h.record(t0.Add(time.Duration(i)*HistoryInterval), pageStatus(float64(i)))
	}
	got := h.series(backendKey("web", "10.0.1.1"))
	if len(got) != int(HistoryLength/HistoryInterval)+1 || got[len(got)-1] != float64(n-1) {
		t.Errorf("kept %d samples ending %v, want %d ending %d", len(got), got[len(got)-1], int(HistoryLength/HistoryInterval)+1, n-1)
	}
	if s := h.series(backendKey("web", "10.9.9.9")); len(s) != len(got) || s[0] != 0 {
		t.Errorf("unknown backend's series: %v", s)
	}
	if p := plotSVG(nil); !strings.Contains(string(p), "collecting samples") {
		t.Errorf("plot of nothing: %s", p)
	}
	var _ template.HTML = plotSVG([]float64{0, 0})
}

// A node that takes its services from a cluster shows the cluster's side on its page:
// synced, the API server's reachability, and each Service port it skipped with the
// reason (escaped); a node without a kubernetes section shows no such section.
func TestStatusPageKubernetes(t *testing.T) {
	render := func(st wire.Status) string {
		t.Helper()
		s := &Server{Node: pageNode{st: st}, OpenReads: true, Log: slog.New(slog.DiscardHandler)}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:9100/", nil))
		if rec.Code != 200 {
			t.Fatalf("GET /: %d", rec.Code)
		}
		return rec.Body.String()
	}
	if page := render(pageStatus(0)); strings.Contains(page, "<h2>Kubernetes") {
		t.Error("a node without a kubernetes section shows one")
	}
	st := pageStatus(0)
	st.Kubernetes = &wire.KubernetesState{Synced: true, Reachable: false, Services: 3, Submitted: 9, Refused: 2,
		Skipped: []string{"default/dns port 53/udp: no IPv6 address on this node <node.address6>"}}
	page := render(st)
	for _, want := range []string{"<h2>Kubernetes", "synced", "API server unreachable", "3 services taken", "9 updates applied", "2 refused",
		`<tr class="down"><td>default/dns port 53/udp: no IPv6 address on this node &lt;node.address6&gt;</td></tr>`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	st.Kubernetes = &wire.KubernetesState{Synced: true, Reachable: true, Services: 3}
	page = render(st)
	section := page[strings.Index(page, "<h2>Kubernetes"):]
	section = section[:strings.Index(section, "\n\n")]
	if !strings.Contains(section, "API server reachable") || !strings.Contains(section, "Every LoadBalancer Service port is served.") || strings.Contains(section, "refused") {
		t.Errorf("a healthy cluster's section:\n%s", section)
	}
}
