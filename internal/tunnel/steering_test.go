package tunnel

import (
	"sync"
	"testing"
	"time"
)

// requests sends n requests, each on its own connection, from 8 clients at once and
// counts the answers by origin; a failed request fails the test.
func requests(t *testing.T, url string, n int) map[string]int {
	t.Helper()
	var mu sync.Mutex
	by := map[string]int{}
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			c := newClient()
			for range next {
				from, err := get(c, url)
				mu.Lock()
				if err != nil {
					t.Errorf("request: %v", err)
				} else {
					by[from]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return by
}

// originOf returns what the edge says of an origin of web.
func originOf(e *testEdge, origin string) OriginStatus {
	for _, o := range e.Origins() {
		if o.Service == "web" && o.Origin == origin {
			return o
		}
	}
	return OriginStatus{}
}

// Two origins, one connector each: the edge sends each the share of the new streams
// that its site's shares give it (counted at the origins), none to an origin whose
// share is 0, and the share of an origin whose connectors have all gone to the other.
// What it tells steering of each origin follows: its connectors, its streams, the
// tunnel's RTT.
func TestStreamsFollowTheOriginShares(t *testing.T) {
	e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{})
	e.SetServiceOrigins(map[string][]string{"web": {"home", "office"}})
	home, office := startOrigin(t, "home"), startOrigin(t, "office")
	startConnector(t, e.connectorFile(t, "h", tokenHome, "  - {name: web, to: "+home.addr+", origin: home}\n"))
	officeConn := startConnector(t, e.connectorFile(t, "o", tokenHome, "  - {name: web, to: "+office.addr+", origin: office}\n"))
	url := "http://" + e.serve(t, "web") + "/"
	waitFor(t, &e.notifier, 10*time.Second, "both connectors attached", func() bool { return len(e.Tunnels()) == 2 })

	e.SetOriginShares(map[string]map[string]float64{"web": {"home": 0.7, "office": 0.3}})
	by := requests(t, url, 1000)
	// the round robin gives 700/300 exactly; free capacity alone (the connectors are
	// alike) would give about 500/500
	if by["office"] < 200 || by["office"] > 400 || by["home"]+by["office"] != 1000 {
		t.Errorf("shares 70/30: home took %d, office %d of 1000 streams; want office within 200..400", by["home"], by["office"])
	}
	h, o := originOf(e, "home"), originOf(e, "office")
	if h.Connectors != 1 || o.Connectors != 1 || int(h.Streams) != by["home"] || int(o.Streams) != by["office"] {
		t.Errorf("the edge says home %+v, office %+v; the origins counted %v", h, o, by)
	}
	if h.RTT <= 0 || o.RTT <= 0 {
		t.Errorf("no RTT measured on the tunnels: home %v, office %v", h.RTT, o.RTT)
	}
	if c := e.Clients()["web"]; c != 1000 {
		t.Errorf("the edge counted %d clients of web, want 1000", c)
	}

	e.SetOriginShares(map[string]map[string]float64{"web": {"home": 1, "office": 0}})
	if by := requests(t, url, 200); by["office"] != 0 || by["home"] != 200 {
		t.Errorf("office's share 0: home took %d, office %d of 200 streams", by["home"], by["office"])
	}

	// home's connector gone: office takes the whole of home's share meanwhile
	// (steering will move the share, seeing home unhealthy), no client waits
	e.SetOriginShares(map[string]map[string]float64{"web": {"home": 0.3, "office": 0.7}})
	officeConn.stop()
	waitFor(t, &e.notifier, 30*time.Second, "office's connector gone", func() bool { return originOf(e, "office").Connectors == 0 })
	if o := originOf(e, "office"); o.RTT != 0 {
		t.Errorf("office without a connector: %+v, want no RTT", o)
	}
	if by := requests(t, url, 50); by["home"] != 50 {
		t.Errorf("office's connector gone: home took %d of 50 streams, office %d", by["home"], by["office"])
	}
}

// Without shares for the service, or with shares that give none of its origins
// anything, the streams go by free capacity to every connector, whatever its origin.
func TestUnsteeredStreamsGoToEveryConnector(t *testing.T) {
	e := startEdge(t, newPKI(t), tokensFile, EdgeConfig{})
	e.SetServiceOrigins(map[string][]string{"web": {"home", "office"}})
	home, office := startOrigin(t, "home"), startOrigin(t, "office")
	startConnector(t, e.connectorFile(t, "h", tokenHome, "  - {name: web, to: "+home.addr+", origin: home}\n"))
	startConnector(t, e.connectorFile(t, "o", tokenHome, "  - {name: web, to: "+office.addr+", origin: office}\n"))
	url := "http://" + e.serve(t, "web") + "/"
	waitFor(t, &e.notifier, 10*time.Second, "both connectors attached", func() bool { return len(e.Tunnels()) == 2 })
	for _, shares := range []map[string]map[string]float64{nil, {"web": {"home": 0, "office": 0}}, {"api": {"home": 1}}} {
		e.SetOriginShares(shares)
		if by := requests(t, url, 100); by["home"] < 30 || by["office"] < 30 {
			t.Errorf("shares %v: home took %d, office %d of 100 streams; want both about half", shares, by["home"], by["office"])
		}
	}
}

// The cost of choosing by shares, per new stream: pickLocked over four connectors of
// two origins, steered (70/30) and not (the reference, in the same run). Each pick
// is released at once, so every connector keeps its room.
func BenchmarkPick(b *testing.B) {
	for _, c := range []struct {
		name   string
		shares map[string]map[string]float64
	}{{"unsteered", nil}, {"steered", map[string]map[string]float64{"web": {"home": 0.7, "office": 0.3}}}} {
		b.Run(c.name, func(b *testing.B) {
			e := &Edge{cfg: EdgeConfig{MaxStreamsPerTunnel: DefaultMaxStreamsPerTunnel}, byService: map[string][]*edgeTunnel{}, shares: map[string]*originShares{}}
			for i, o := range []string{"home", "home", "office", "office"} {
				t := &edgeTunnel{id: uint64(i), services: map[string]*serviceSlot{"web": {origin: o, capacity: 100}}}
				e.byService["web"] = append(e.byService["web"], t)
			}
			e.SetOriginShares(c.shares)
			for b.Loop() {
				t, slot := e.pickLocked("web", nil, false)
				slot.open--
				t.open--
			}
		})
	}
}
