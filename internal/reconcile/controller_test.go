package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/manifoldlb/manifold/internal/bgp"
	"github.com/manifoldlb/manifold/internal/clock"
	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/health"
)

// fakeSpeaker is the BGP speaker as the routers would see it: the set of VIPs announced,
// and the order of everything done to it.
type fakeSpeaker struct {
	announced map[netip.Addr]bgp.Attributes
	peers     []config.Peer
	log       []string // "announce 198.51.100.10", "reannounce …" (other attributes), "withdraw …", "close"
	failNext  bool     // the next Announce fails
	closed    bool
	calls     int // Announce and Withdraw calls, idempotent ones included
}

func newFakeSpeaker() *fakeSpeaker { return &fakeSpeaker{announced: map[netip.Addr]bgp.Attributes{}} }

func (s *fakeSpeaker) Announce(vip netip.Addr, attrs bgp.Attributes) error {
	s.calls++
	if s.closed {
		return errors.New("announce after close")
	}
	if s.failNext {
		s.failNext = false
		return errors.New("injected announce error")
	}
	was, ok := s.announced[vip]
	switch {
	case !ok:
		s.log = append(s.log, "announce "+vip.String())
	case !reflect.DeepEqual(was, attrs):
		s.log = append(s.log, "reannounce "+vip.String())
	}
	s.announced[vip] = attrs
	return nil
}

func (s *fakeSpeaker) SetPeers(peers []config.Peer) error {
	s.peers = slices.Clone(peers)
	s.log = append(s.log, fmt.Sprintf("peers %d", len(peers)))
	return nil
}

func (s *fakeSpeaker) Withdraw(vip netip.Addr) error {
	s.calls++
	delete(s.announced, vip)
	s.log = append(s.log, "withdraw "+vip.String())
	return nil
}

func (s *fakeSpeaker) Announced() []netip.Addr {
	var out []netip.Addr
	for a := range s.announced {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func (s *fakeSpeaker) Peers() []bgp.PeerState { return nil }

func (s *fakeSpeaker) Close() error {
	clear(s.announced)
	s.closed = true
	s.log = append(s.log, "close")
	return nil
}

func (s *fakeSpeaker) is(vips ...string) bool {
	if len(vips) != len(s.announced) {
		return false
	}
	for _, v := range vips {
		if _, ok := s.announced[netip.MustParseAddr(v)]; !ok {
			return false
		}
	}
	return true
}

// fakeHealth answers Up and Known from sets the test controls, and records the
// targets set.
type fakeHealth struct {
	down, unknown map[netip.Addr]bool
	targets       []health.Target
}

func (h *fakeHealth) Set(t []health.Target)      { h.targets = slices.Clone(t) }
func (h *fakeHealth) Up(t health.Target) bool    { return !h.down[t.Addr] }
func (h *fakeHealth) Known(t health.Target) bool { return !h.unknown[t.Addr] }

type fakeNeighbours struct{ last []netip.Addr }

func (n *fakeNeighbours) Ensure(b []netip.Addr) { n.last = slices.Clone(b) }

type rig struct {
	t       *testing.T
	dp      *fakeDP
	speaker *fakeSpeaker
	health  *fakeHealth
	neigh   *fakeNeighbours
	clock   *clock.Fake
	c       *Controller
}

const vip1, vip2 = "198.51.100.10", "198.51.100.11"

func newRig(t *testing.T, withBGP bool, drain time.Duration) *rig {
	r := &rig{t: t, dp: newFake(t), health: &fakeHealth{down: map[netip.Addr]bool{}}, neigh: &fakeNeighbours{},
		clock: clock.NewFake(time.Unix(0, 0))}
	o := Options{Dataplane: r.dp, Health: r.health, Neighbours: r.neigh, Clock: r.clock, Log: slog.New(slog.DiscardHandler)}
	if withBGP {
		r.speaker = newFakeSpeaker()
		o.Speaker, o.BGP = r.speaker, &config.BGP{DrainTime: drain}
	}
	r.c = NewController(o)
	return r
}

// withCheck gives a service a TCP health check, so the fake health decides.
func withCheck(s config.Service) config.Service {
	s.Health = config.Health{Kind: config.HealthTCP, Port: 80, Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}
	return s
}

func (r *rig) submit(services ...config.Service) {
	r.t.Helper()
	if err := r.c.Submit(Update{Source: "file", Services: services}); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) announcement(service string) Announcement {
	a, _ := r.c.View().Announcement(service)
	return a
}

func TestAnnounceOnlyOnceAttached(t *testing.T) {
	r := newRig(t, true, 0)
	r.submit(withCheck(svc("web", vip1, 80, "10.0.1.1")))
	if len(r.speaker.announced) != 0 {
		t.Fatalf("announced %v before the data plane was attached", r.speaker.Announced())
	}
	if a := r.announcement("web"); a.Announced || a.Reason != ReasonNotAttached {
		t.Fatalf("before attach: %+v", a)
	}
	r.c.Attached()
	if !r.speaker.is(vip1) {
		t.Fatalf("attached with a healthy backend: announced %v, want %s", r.speaker.Announced(), vip1)
	}
	if a := r.announcement("web"); !a.Announced || a.Reason != "1 of 1 backends healthy" {
		t.Fatalf("after attach: %+v", a)
	}
}

func TestWithdrawWhenNoBackendIsHealthyAndAnnounceOnRecovery(t *testing.T) {
	r := newRig(t, true, 0)
	r.submit(withCheck(svc("web", vip1, 80, "10.0.1.1", "10.0.1.2")))
	r.c.Attached()
	r.health.down[netip.MustParseAddr("10.0.1.1")] = true
	r.c.HealthChanged()
	if a := r.announcement("web"); !r.speaker.is(vip1) || a.Reason != "1 of 2 backends healthy" {
		t.Fatalf("one of two down: announced %v, %+v", r.speaker.Announced(), a)
	}
	r.health.down[netip.MustParseAddr("10.0.1.2")] = true
	r.c.HealthChanged()
	if a := r.announcement("web"); !r.speaker.is() || a.Announced || a.Reason != ReasonNoBackend {
		t.Fatalf("all down: announced %v, %+v", r.speaker.Announced(), a)
	}
	delete(r.health.down, netip.MustParseAddr("10.0.1.2"))
	r.c.HealthChanged()
	if !r.speaker.is(vip1) {
		t.Fatalf("a backend recovered: announced %v, want %s", r.speaker.Announced(), vip1)
	}
	if want := []string{"announce " + vip1, "withdraw " + vip1, "announce " + vip1}; !slices.Equal(r.speaker.log, want) {
		t.Errorf("speaker saw %v, want %v", r.speaker.log, want)
	}
}

// TestAnnounceWaitsUntilEveryBackendIsChecked: a node that starts (or comes back)
// announces a service only once the health of each backend is known. Before, its
// table holds only the backends whose checks passed so far, unlike the tables of the
// other nodes, and flows the router moves to it go to other backends and break (the
// chaos soak's node-restart rounds). A backend added to an announced service does
// not withdraw it.
func TestAnnounceWaitsUntilEveryBackendIsChecked(t *testing.T) {
	r := newRig(t, true, 0)
	b2, b3 := netip.MustParseAddr("10.0.1.2"), netip.MustParseAddr("10.0.1.3")
	r.health.down[b2], r.health.unknown = true, map[netip.Addr]bool{b2: true}
	r.submit(withCheck(svc("web", vip1, 80, "10.0.1.1", "10.0.1.2")))
	r.c.Attached()
	if a := r.announcement("web"); !r.speaker.is() || a.Announced || a.Reason != "1 of 2 backends healthy, 1 not checked yet" {
		t.Fatalf("10.0.1.2 not checked yet: announced %v, %+v", r.speaker.Announced(), a)
	}
	delete(r.health.unknown, b2) // its first check failed
	r.c.HealthChanged()
	if a := r.announcement("web"); !r.speaker.is(vip1) || a.Reason != "1 of 2 backends healthy" {
		t.Fatalf("every backend checked: announced %v, %+v", r.speaker.Announced(), a)
	}
	r.health.down[b3], r.health.unknown[b3] = true, true
	r.submit(withCheck(svc("web", vip1, 80, "10.0.1.1", "10.0.1.2", "10.0.1.3")))
	if want := []string{"announce " + vip1}; !r.speaker.is(vip1) || !slices.Equal(r.speaker.log, want) {
		t.Errorf("a backend added while announced: announced %v, the speaker saw %v, want %v", r.speaker.Announced(), r.speaker.log, want)
	}
}

// TestHoldWithdrawsUntilReleasedAndChecked: a node that did not run for a while holds
// its VIPs back (Hold) while it catches up, and after Release announces each service
// only once every backend's health is fresh again — the chaos soak's node-cont rounds
// broke connections when a resumed node took traffic with the rings of before its stop.
// Two holds need two releases.
func TestHoldWithdrawsUntilReleasedAndChecked(t *testing.T) {
	r := newRig(t, true, 0)
	b1 := netip.MustParseAddr("10.0.1.1")
	r.submit(withCheck(svc("web", vip1, 80, "10.0.1.1", "10.0.1.2")))
	r.c.Attached()
	if !r.speaker.is(vip1) {
		t.Fatalf("announced %v, want %s", r.speaker.Announced(), vip1)
	}
	const why = "resumed after 5s without running"
	r.c.Hold(why)
	r.c.Hold(why)
	if a := r.announcement("web"); !r.speaker.is() || a.Announced || a.Reason != why {
		t.Fatalf("held: announced %v, %+v", r.speaker.Announced(), a)
	}
	r.health.unknown = map[netip.Addr]bool{b1: true} // rechecking
	r.c.Release()
	if !r.speaker.is() {
		t.Fatalf("one of two holds released: announced %v", r.speaker.Announced())
	}
	r.c.Release()
	if a := r.announcement("web"); !r.speaker.is() || a.Reason != "1 of 2 backends healthy, 1 not checked yet" {
		t.Fatalf("released, 10.0.1.1 not checked again yet: announced %v, %+v", r.speaker.Announced(), a)
	}
	delete(r.health.unknown, b1)
	r.c.HealthChanged()
	if !r.speaker.is(vip1) {
		t.Fatalf("released and every backend checked: announced %v, want %s", r.speaker.Announced(), vip1)
	}
}

func TestDrainingBackendKeepsTheVIPAnnounced(t *testing.T) {
	r := newRig(t, true, 0)
	web := withCheck(svc("web", vip1, 80, "10.0.1.1"))
	web.Backends[0].Weight = 0
	r.submit(web)
	r.c.Attached()
	if !r.speaker.is(vip1) {
		t.Fatalf("a draining healthy backend's flows need the node: announced %v", r.speaker.Announced())
	}
}

func TestSharedVIPAnnouncedWhileAnyServiceWantsIt(t *testing.T) {
	r := newRig(t, true, 0)
	web := withCheck(svc("web", vip1, 80, "10.0.1.1"))
	tls := withCheck(svc("tls", vip1, 443, "10.0.1.2"))
	r.submit(web, tls)
	r.c.Attached()
	r.health.down[netip.MustParseAddr("10.0.1.1")] = true
	r.c.HealthChanged()
	if !r.speaker.is(vip1) {
		t.Fatalf("tls still has a healthy backend: announced %v", r.speaker.Announced())
	}
	if a := r.announcement("web"); a.Announced || a.Reason != ReasonNoBackend {
		t.Errorf("web: %+v", a)
	}
	r.health.down[netip.MustParseAddr("10.0.1.2")] = true
	r.c.HealthChanged()
	if !r.speaker.is() {
		t.Fatalf("no service of the VIP has a healthy backend: announced %v", r.speaker.Announced())
	}
}

func TestRemovedServiceIsWithdrawnAndOnlyServedVIPsAreAnnounced(t *testing.T) {
	r := newRig(t, true, 0)
	r.submit(svc("web", vip1, 80, "10.0.1.1"), svc("api", vip2, 80, "10.0.1.2"))
	r.c.Attached()
	if !r.speaker.is(vip1, vip2) {
		t.Fatalf("announced %v", r.speaker.Announced())
	}
	r.submit(svc("web", vip1, 80, "10.0.1.1"))
	if !r.speaker.is(vip1) {
		t.Fatalf("after removing api: announced %v, want only %s", r.speaker.Announced(), vip1)
	}
	// a VIP announced by something else than the policy (a stale route) goes too
	r.speaker.announced[netip.MustParseAddr("203.0.113.1")] = bgp.Attributes{}
	r.c.Refresh()
	r.c.HealthChanged()
	if !r.speaker.is(vip1) {
		t.Fatalf("a VIP of no service stays announced: %v", r.speaker.Announced())
	}
}

// The neighbour refresh (every 5 s) resolves every backend's next hop again and
// republishes nothing: the view does not show next hops, and a republish copied every
// service's status.
func TestRefreshResolvesNextHopsAndLeavesTheView(t *testing.T) {
	r := newRig(t, true, 0)
	r.submit(svc("web", vip1, 80, "10.0.1.1"), svc("api", vip2, 80, "10.0.1.2"))
	r.c.Attached()
	before := r.c.View()
	r.neigh.last = nil
	r.c.Refresh()
	if len(r.neigh.last) != 2 {
		t.Errorf("the refresh resolved the next hops of %v, want both backends", r.neigh.last)
	}
	after := r.c.View()
	if len(after.Services) != 2 || after.Services[0] != before.Services[0] || after.Services[1] != before.Services[1] {
		t.Errorf("the refresh republished the services: %p %p, before %p %p", after.Services[0], after.Services[1], before.Services[0], before.Services[1])
	}
}

func TestNoBGPSectionMeansNoAnnouncementAndAReason(t *testing.T) {
	r := newRig(t, false, 0)
	r.submit(svc("web", vip1, 80, "10.0.1.1"))
	r.c.Attached()
	if a := r.announcement("web"); a.Announced || a.Reason != ReasonNoBGP {
		t.Fatalf("%+v", a)
	}
	r.c.Stop(nil) // nothing to withdraw or close; must not block
}

func TestAnnounceErrorIsRetriedAtTheNextChange(t *testing.T) {
	r := newRig(t, true, 0)
	r.submit(svc("web", vip1, 80, "10.0.1.1"))
	r.speaker.failNext = true
	r.c.Attached()
	if !r.speaker.is() {
		t.Fatalf("the announce failed but %v is announced", r.speaker.Announced())
	}
	r.c.HealthChanged()
	if !r.speaker.is(vip1) {
		t.Fatalf("not retried: %v", r.speaker.Announced())
	}
}

// Stopping withdraws every VIP first, keeps forwarding (the maps untouched) for the
// drain time on the clock, and only then closes the sessions.
func TestStopWithdrawsThenDrainsThenCloses(t *testing.T) {
	r := newRig(t, true, 2*time.Second)
	r.submit(svc("web", vip1, 80, "10.0.1.1"), svc("api", vip2, 80, "10.0.1.2"))
	r.c.Attached()
	writes := r.dp.writes
	stopped := make(chan struct{})
	go func() { r.c.Stop(nil); close(stopped) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.clock.BlockUntilContext(ctx, 1); err != nil { // Stop waits on its drain timer
		t.Fatalf("Stop never waited for the drain time: %v", err)
	}
	select {
	case <-stopped:
		t.Fatal("Stop returned before the drain time passed")
	default:
	}
	if a := r.announcement("web"); a.Announced || a.Reason != ReasonStopping {
		t.Errorf("while draining: %+v", a)
	}
	r.clock.Advance(2*time.Second - time.Millisecond)
	if r.clock.Waiters() != 1 {
		t.Fatal("the drain timer fired early")
	}
	r.clock.Advance(time.Millisecond)
	<-stopped
	want := []string{"withdraw " + vip1, "withdraw " + vip2, "close"}
	got := r.speaker.log[2:] // after the two announcements
	slices.Sort(got[:2])
	if !slices.Equal(got, want) {
		t.Errorf("speaker saw %v after the announcements, want %v", got, want)
	}
	if r.dp.writes != writes {
		t.Errorf("stopping wrote %d map entries: the node must keep forwarding while it drains", r.dp.writes-writes)
	}
}

func TestStopAbortEndsTheDrainEarly(t *testing.T) {
	r := newRig(t, true, time.Hour)
	r.submit(svc("web", vip1, 80, "10.0.1.1"))
	r.c.Attached()
	abort := make(chan struct{})
	close(abort)
	r.c.Stop(abort)
	if !r.speaker.closed {
		t.Fatal("sessions not closed")
	}
}

// The transaction: Commit before any map write; a kernel refusal puts back the maps,
// the health targets and the source (Revert), and leaves the announcements alone.
func TestSubmitCommitsBeforeWritingAndRevertsOnKernelError(t *testing.T) {
	r := newRig(t, true, 0)
	old := withCheck(svc("web", vip1, 80, "10.0.1.1", "10.0.1.2"))
	r.submit(old)
	r.c.Attached()
	ringBefore := r.c.maps.RingAddrs("web")
	targetsBefore := slices.Clone(r.health.targets)

	for failAt := 1; ; failAt++ {
		var steps []string
		writesAtCommit := -1
		r.dp.failAt = r.dp.writes + failAt
		next := withCheck(svc("web", vip1, 80, "10.0.1.1", "10.0.1.3"))
		err := r.c.Submit(Update{Source: "file", Services: []config.Service{next, svc("api", vip2, 80, "10.0.2.1")},
			Commit: func() error { writesAtCommit = r.dp.writes; steps = append(steps, "commit"); return nil },
			Revert: func() error { steps = append(steps, "revert"); return nil },
		})
		if err == nil {
			r.dp.failAt = 0
			if failAt == 1 {
				t.Fatal("the update made no map write")
			}
			if !slices.Equal(steps, []string{"commit"}) {
				t.Errorf("a good update: %v", steps)
			}
			if !r.speaker.is(vip1, vip2) {
				t.Errorf("after the good update: announced %v", r.speaker.Announced())
			}
			return
		}
		var kerr *KernelError
		if !errors.As(err, &kerr) || !errors.Is(err, errInjected) {
			t.Fatalf("fail at write %d: error %v is not a KernelError wrapping the map error", failAt, err)
		}
		if !slices.Equal(steps, []string{"commit", "revert"}) {
			t.Fatalf("fail at write %d: steps %v, want commit then revert", failAt, steps)
		}
		if writesAtCommit != r.dp.failAt-failAt {
			t.Fatalf("fail at write %d: Commit ran after a map write", failAt)
		}
		if got := r.c.maps.RingAddrs("web"); !slices.Equal(got, ringBefore) {
			t.Fatalf("fail at write %d: web ring changed", failAt)
		}
		if !slices.Equal(r.health.targets, targetsBefore) {
			t.Fatalf("fail at write %d: health targets %v, want %v", failAt, r.health.targets, targetsBefore)
		}
		if !r.speaker.is(vip1) {
			t.Fatalf("fail at write %d: announced %v", failAt, r.speaker.Announced())
		}
		if _, ok := r.c.View().Announcement("api"); ok {
			t.Fatalf("fail at write %d: the refused service shows in the view", failAt)
		}
	}
}

func TestFailedCommitWritesNothing(t *testing.T) {
	r := newRig(t, true, 0)
	r.submit(svc("web", vip1, 80, "10.0.1.1"))
	writes := r.dp.writes
	commitErr := errors.New("disk full")
	err := r.c.Submit(Update{Source: "file", Services: []config.Service{svc("api", vip2, 80, "10.0.2.1")},
		Commit: func() error { return commitErr }})
	if !errors.Is(err, commitErr) {
		t.Fatalf("err = %v", err)
	}
	if r.dp.writes != writes {
		t.Errorf("a failed commit made %d map writes", r.dp.writes-writes)
	}
}

// Sources each own their services: a second source adds its own, and may not take a
// name or a VIP:port/protocol another serves.
func TestSourcesAreMergedAndMayNotCollide(t *testing.T) {
	r := newRig(t, false, 0)
	r.submit(svc("web", vip1, 80, "10.0.1.1"))
	if err := r.c.Submit(Update{Source: "kubernetes", Services: []config.Service{svc("kube-web", vip2, 80, "10.0.2.1")}}); err != nil {
		t.Fatal(err)
	}
	if names := serviceNames(r.c); !slices.Equal(names, []string{"kube-web", "web"}) {
		t.Fatalf("served %v", names)
	}
	for _, bad := range []config.Service{
		svc("web", vip2, 8080, "10.0.2.1"), // a name of the file's
		svc("other", vip1, 80, "10.0.2.1"), // the file's VIP:port/protocol
	} {
		writes := r.dp.writes
		err := r.c.Submit(Update{Source: "kubernetes", Services: []config.Service{bad}, Commit: func() error {
			t.Error("a conflicting update was committed")
			return nil
		}})
		var conflict *ConflictError
		if !errors.As(err, &conflict) || !strings.Contains(err.Error(), "file") {
			t.Errorf("%s: err = %v, want a ConflictError naming the other source", bad.Name, err)
		}
		if r.dp.writes != writes {
			t.Errorf("%s: a refused update wrote the maps", bad.Name)
		}
	}
	if names := serviceNames(r.c); !slices.Equal(names, []string{"kube-web", "web"}) {
		t.Fatalf("after refused updates: served %v", names)
	}
	// a source that sends nothing any more gives its services up
	if err := r.c.Submit(Update{Source: "kubernetes"}); err != nil {
		t.Fatal(err)
	}
	if names := serviceNames(r.c); !slices.Equal(names, []string{"web"}) {
		t.Fatalf("served %v", names)
	}
}

func TestHealthTargetsAndNeighboursFollowTheServices(t *testing.T) {
	r := newRig(t, false, 0)
	r.submit(withCheck(svc("web", vip1, 80, "10.0.1.1", "10.0.1.2")), svc("dns", vip2, 53, "10.0.2.1"))
	if len(r.health.targets) != 2 {
		t.Fatalf("targets %v: want the two checked backends only", r.health.targets)
	}
	if len(r.neigh.last) != 3 {
		t.Fatalf("neighbours of %v: want every backend", r.neigh.last)
	}
	r.submit(svc("dns", vip2, 53, "10.0.2.1"))
	if len(r.health.targets) != 0 || len(r.neigh.last) != 1 {
		t.Fatalf("after removing web: targets %v, neighbours %v", r.health.targets, r.neigh.last)
	}
}

func serviceNames(c *Controller) []string {
	var out []string
	for _, s := range c.View().Services {
		out = append(out, s.Config.Name)
	}
	return out
}

// A VIP's route carries the node's communities and those of every service that wants
// it announced, the highest MED and the longest prepend; a changed bgp section in an
// update reaches the peers and every route.
func TestAnnouncementAttributes(t *testing.T) {
	r := newRig(t, true, 0)
	low, high := uint32(10), uint32(50)
	web := withCheck(svc("web", vip1, 80, "10.0.1.1"))
	web.BGP = config.ServiceBGP{Communities: []config.Community{65001<<16 | 1}, MED: &low, Prepend: 2}
	tls := withCheck(svc("tls", vip1, 443, "10.0.1.2"))
	tls.BGP = config.ServiceBGP{LargeCommunities: []config.LargeCommunity{{Global: 65001, Local1: 1, Local2: 2}}, MED: &high}
	r.submit(web, tls)
	r.c.Attached()
	want := bgp.Attributes{Communities: []config.Community{65001<<16 | 1},
		LargeCommunities: []config.LargeCommunity{{Global: 65001, Local1: 1, Local2: 2}}, MED: &high, Prepend: 2}
	if got := r.speaker.announced[netip.MustParseAddr(vip1)]; !reflect.DeepEqual(got, want) {
		t.Fatalf("route of %s carries %+v, want %+v", vip1, got, want)
	}
	// web's backend down: only tls wants the VIP now
	r.health.down[netip.MustParseAddr("10.0.1.1")] = true
	r.c.HealthChanged()
	want = bgp.Attributes{LargeCommunities: tls.BGP.LargeCommunities, MED: &high}
	if got := r.speaker.announced[netip.MustParseAddr(vip1)]; !reflect.DeepEqual(got, want) {
		t.Fatalf("with web down the route carries %+v, want tls's alone %+v", got, want)
	}
	nodeBGP := &config.BGP{Communities: []config.Community{65001<<16 | 9}, Peers: []config.Peer{{Address: netip.MustParseAddr("10.0.0.1"), ASN: 65000}}}
	if err := r.c.Submit(Update{Source: "file", Services: []config.Service{web, tls}, BGP: nodeBGP}); err != nil {
		t.Fatal(err)
	}
	want.Communities = nodeBGP.Communities
	if got := r.speaker.announced[netip.MustParseAddr(vip1)]; !reflect.DeepEqual(got, want) {
		t.Fatalf("after the bgp section changed the route carries %+v, want %+v", got, want)
	}
	if w := []string{"announce " + vip1, "reannounce " + vip1, "peers 1", "reannounce " + vip1}; !slices.Equal(r.speaker.log, w) {
		t.Errorf("speaker saw %v, want %v", r.speaker.log, w)
	}

	// a Delta update that changes the bgp section (a reload of the file that edits one
	// service and the node's communities) reaches the routes of the services it does
	// not name as well
	other := withCheck(svc("other", vip2, 80, "10.0.1.3"))
	if err := r.c.Submit(Update{Source: "file", Services: []config.Service{other}, Delta: true}); err != nil {
		t.Fatal(err)
	}
	nodeBGP = &config.BGP{Communities: []config.Community{65001<<16 | 10}, Peers: nodeBGP.Peers}
	other.Port = 8080
	if err := r.c.Submit(Update{Source: "file", Services: []config.Service{other}, Delta: true, BGP: nodeBGP}); err != nil {
		t.Fatal(err)
	}
	want.Communities = nodeBGP.Communities
	if got := r.speaker.announced[netip.MustParseAddr(vip1)]; !reflect.DeepEqual(got, want) {
		t.Fatalf("after a delta changed the bgp section, %s (of services the delta does not name) carries %+v, want %+v", vip1, got, want)
	}
}

// A tunnel service is the edge's: the XDP program must not know its VIP (its packets
// pass to the stack), and it is announced exactly while a connector is attached.
func TestTunnelServiceStaysOutOfTheMapsAndIsAnnouncedWhileConnected(t *testing.T) {
	r := newRig(t, true, 0)
	tun := config.Service{Name: "home", VIP: netip.MustParseAddr(vip2), Port: 443, Protocol: config.TCP, Forwarding: config.Tunnel}
	r.submit(svc("web", vip1, 80, "10.0.1.1"), tun)
	r.c.Attached()
	if _, known := r.dp.vipAddrs[netip.MustParseAddr(vip2)]; known || len(r.dp.services) != 1 {
		t.Fatalf("the data plane has %v (vip addresses %v): only web belongs there", r.dp.services, r.dp.vipAddrs)
	}
	if v := r.c.View(); len(v.Tunnels) != 1 || v.Tunnels[0].Name != "home" || len(v.Services) != 1 {
		t.Fatalf("view: tunnels %v, services %v", v.Tunnels, v.Services)
	}
	if a := r.announcement("home"); !r.speaker.is(vip1) || a.Announced || a.Reason != ReasonNoConnector {
		t.Fatalf("no connector: announced %v, %+v", r.speaker.Announced(), a)
	}
	r.c.TunnelsConnected(map[string]bool{"home": true})
	if a := r.announcement("home"); !r.speaker.is(vip1, vip2) || !a.Announced {
		t.Fatalf("a connector attached: announced %v, %+v", r.speaker.Announced(), a)
	}
	r.c.TunnelsConnected(map[string]bool{})
	if !r.speaker.is(vip1) {
		t.Fatalf("the last connector left: announced %v", r.speaker.Announced())
	}
}

// A routed service with an origin reached by tunnel is announced while a backend is
// healthy, as any; with every backend down, while a connector of it is attached.
func TestMixedServiceAnnouncedWhileBackendsOrConnectors(t *testing.T) {
	r := newRig(t, true, 0)
	web := svc("web", vip1, 443, "10.0.1.1")
	web.Health = config.Health{Kind: config.HealthTCP, Port: 443, Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}
	web.Origins = []config.Origin{{Name: "dc", Capacity: 10}, {Name: "home", Capacity: 10, Tunnel: true, Weight: 1}}
	web.Backends[0].Origin = "dc"
	r.submit(web)
	r.c.Attached()
	if a := r.announcement("web"); !a.Announced {
		t.Fatalf("a healthy backend: %+v", a)
	}
	r.health.down[netip.MustParseAddr("10.0.1.1")] = true
	r.c.HealthChanged()
	if a := r.announcement("web"); a.Announced || a.Reason != ReasonNoBackend {
		t.Fatalf("its backend down, no connector: %+v, want not announced (%s)", a, ReasonNoBackend)
	}
	r.c.TunnelsConnected(map[string]bool{"web": true})
	if a := r.announcement("web"); !a.Announced || !r.speaker.is(vip1) {
		t.Fatalf("its backend down, a connector attached: %+v (announced %v), want announced", a, r.speaker.Announced())
	}
}
