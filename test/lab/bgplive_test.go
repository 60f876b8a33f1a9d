package lab

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Live BGP changes: a reload adds and removes a peer, turns BFD on and changes a hold
// time; only the session whose settings changed restarts, as the router sees it.

var holdTimer = regexp.MustCompile(`Hold timer:\s+[0-9.]+/([0-9]+)`)

func TestBGPLiveChanges(t *testing.T) {
	a := newActiveActive(t, ActiveActiveSpec{Nodes: 2, Backends: 1, Health: activeHealth, HoldTime: holdTime})
	for _, role := range []string{"lb1", "lb2"} {
		if err := a.StartNode(role); err != nil {
			t.Fatal(err)
		}
	}
	waitRoutes(t, a, webVIPs, 5*time.Second, "lb1", "lb2")
	since := func(role string) string {
		t.Helper()
		s, err := a.Bird.ProtocolSince(role)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// settledSince is a session's "since" once it has stopped moving: BIRD may note a
	// second state change a millisecond after a session comes up (seen once after the
	// hold-time restart below), and a baseline read in between would call that a restart.
	settledSince := func(role string) string {
		t.Helper()
		var last string
		err := Eventually(5*time.Second, 250*time.Millisecond, func() error {
			s := since(role)
			if s != last {
				last = s
				return fmt.Errorf("%s's session since %s: not settled yet", role, s)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return last
	}
	lb1Since, lb2Since := settledSince("lb1"), settledSince("lb2")
	lb1 := a.Configs["lb1"]
	reloads := 0
	reload := func(what string, wantPeers int) {
		t.Helper()
		if err := a.Running["lb1"].Reload(lb1); err != nil {
			t.Fatal(err)
		}
		reloads++
		// the node logs each applied bgp section once
		if err := Eventually(5*time.Second, 20*time.Millisecond, func() error {
			if n := strings.Count(a.Running["lb1"].Log(), "bgp section applied"); n < reloads {
				return fmt.Errorf("%s: %d bgp sections applied, want %d", what, n, reloads)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		st, err := a.Status("lb1")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.BGP.Peers) != wantPeers {
			t.Fatalf("%s: lb1 has peers %+v, want %d", what, st.BGP.Peers, wantPeers)
		}
	}
	untouched := func(what string, roles ...string) {
		t.Helper()
		for _, role := range roles {
			want := map[string]string{"lb1": lb1Since, "lb2": lb2Since}[role]
			if got := since(role); got != want {
				t.Errorf("%s: the router's session with %s restarted (since %s, was %s)", what, role, got, want)
			}
		}
	}

	lb1.BGP.Peers = append(lb1.BGP.Peers, a.RefusingPeer(a.Host("lb1")))
	reload("peer added", 2)
	untouched("peer added", "lb1", "lb2")

	lb1.BGP.Peers[0].BFD = &BFD{MinRx: 100 * time.Millisecond, MinTx: 100 * time.Millisecond, Multiplier: 3}
	reload("BFD turned on", 2)
	untouched("BFD turned on", "lb1", "lb2")

	lb1.BGP.Peers = lb1.BGP.Peers[:1]
	reload("peer removed", 1)
	untouched("peer removed", "lb1", "lb2")

	// a hold time is agreed in the OPEN: lb1's session restarts with it, lb2's not
	lb1.BGP.Peers[0].HoldTime = 6 * time.Second
	reload("hold time changed", 1)
	err := Eventually(connectRetryBound, 50*time.Millisecond, func() error {
		out, err := a.Bird.Show("protocols", "all", "lb1")
		if err != nil {
			return err
		}
		m := holdTimer.FindStringSubmatch(out)
		if m == nil {
			return fmt.Errorf("no hold timer in:\n%s", out)
		}
		// the router's own hold time is 3 s; the lower of the two wins, so the new one
		// shows only as a restarted session
		if s := since("lb1"); s == lb1Since {
			return fmt.Errorf("lb1's session not restarted yet (hold timer %s s)", m[1])
		}
		if h, _ := strconv.Atoi(m[1]); h <= 0 {
			return fmt.Errorf("session not up: hold timer %s", m[1])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	untouched("lb1's hold time changed", "lb2")
	waitRoutes(t, a, webVIPs, connectRetryBound, "lb1", "lb2")
	lb1Since = settledSince("lb1")

	// through the API: a peer added and removed, the router's sessions untouched
	nodeAPI := NewNodeAPI(a.Host("lb1"))
	refusing := a.RefusingPeer(a.Host("lb1"))
	body := fmt.Sprintf(`{"asn": %d, "port": %d, "hold_time": "3s"}`, refusing.ASN, refusing.Port)
	for _, call := range []struct {
		method, body string
		code, peers  int
	}{{"PUT", body, 201, 2}, {"DELETE", "", 204, 1}} {
		code, out, err := nodeAPI.Call(call.method, "/api/v1/bgp/peers/"+refusing.Address.String(), call.body)
		if err != nil || code != call.code {
			t.Fatalf("%s peer %s: %d %s %v, want %d", call.method, refusing.Address, code, out, err, call.code)
		}
		st, err := a.Status("lb1")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.BGP.Peers) != call.peers {
			t.Fatalf("after %s through the API lb1 has peers %+v, want %d", call.method, st.BGP.Peers, call.peers)
		}
		untouched(call.method+" of a peer through the API", "lb1", "lb2")
	}

	// what only a restart changes is refused, and nothing changes
	lb1.BGP.ASN = NodeASN + 1
	if err := a.Running["lb1"].Reload(lb1); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Running["lb1"].WaitLog(5*time.Second, func(l string) bool {
		return regexp.MustCompile(`reload rejected.*asn or router_id changed`).MatchString(l)
	}); err != nil {
		t.Fatalf("a changed ASN was not refused: %v", err)
	}
	untouched("ASN change refused", "lb1", "lb2")
}
