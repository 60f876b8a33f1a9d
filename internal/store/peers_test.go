package store

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// A peer added, replaced and removed through the store: the file keeps its comments
// and the other peer, the config gets exactly the change, and bad edits change nothing.
func TestPeerEdits(t *testing.T) {
	st := open(t, "node.yaml")
	commit := func(ch *Change, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Commit(ch); err != nil {
			t.Fatal(err)
		}
	}
	ch, err := st.PutPeer("10.0.0.2", []byte(`{"asn": 65000, "bfd": {"min_rx": "100ms"}}`))
	if err == nil && !ch.Created {
		t.Error("a new peer is not marked created")
	}
	commit(ch, err)
	peers := st.Config().BGP.Peers
	if len(peers) != 2 || peers[0].Password != "hunter2" || peers[1].Address != netip.MustParseAddr("10.0.0.2") ||
		peers[1].BFD == nil || peers[1].BFD.MinRx != 100*time.Millisecond || peers[1].BFD.MinTx != 300*time.Millisecond {
		t.Fatalf("peers after the add: %+v", peers)
	}
	commit(st.PutPeer("10.0.0.2", []byte(`{"address": "10.0.0.2", "asn": 65002}`)))
	if p := st.Config().BGP.Peers[1]; p.ASN != 65002 || p.BFD != nil {
		t.Fatalf("peer after the replace: %+v", p)
	}
	before := read(t, st)
	for _, bad := range []struct {
		edit func() (*Change, error)
		kind Kind
		what string
	}{
		{func() (*Change, error) { return st.PutPeer("10.0.0.2", []byte(`{"asn": 65000, "hold_time": "1s"}`)) }, Invalid, "hold_time"},
		{func() (*Change, error) {
			return st.PutPeer("10.0.0.2", []byte(`{"address": "10.0.0.3", "asn": 65000}`))
		}, Invalid, "address"},
		{func() (*Change, error) { return st.PutPeer("10.0.0", []byte(`{"asn": 65000}`)) }, Invalid, "address"},
		{func() (*Change, error) { return st.DeletePeer("10.0.0.9") }, NotFound, "address"},
	} {
		_, err := bad.edit()
		var se *Error
		if !errors.As(err, &se) || se.Kind != bad.kind || !strings.Contains(se.Error(), bad.what) {
			t.Errorf("want a %v error about %s, got %v", bad.kind, bad.what, err)
		}
	}
	if read(t, st) != before {
		t.Fatal("a refused edit changed the file")
	}
	commit(st.DeletePeer("10.0.0.2"))
	if peers := st.Config().BGP.Peers; len(peers) != 1 || peers[0].Address != netip.MustParseAddr("10.0.0.1") {
		t.Fatalf("peers after the delete: %+v", peers)
	}
	if _, err := st.DeletePeer("10.0.0.1"); err == nil {
		t.Error("the last peer was removed")
	}
	if !strings.Contains(read(t, st), "# lb1 — edited by hand and through the API") {
		t.Errorf("the file lost its comments:\n%s", read(t, st))
	}
}
