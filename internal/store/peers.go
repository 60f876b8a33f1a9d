package store

import (
	"fmt"
	"net/netip"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/manifoldlb/manifold/internal/config"
)

// PutPeer creates or replaces the BGP peer at address with the JSON body spec (the
// fields of a peer in the config file; address may be left out). Left-out fields take
// their defaults, as in the file. The node applies it live, touching only that
// peer's session (see bgp.GoBGP.SetPeers).
func (s *Store) PutPeer(address string, spec []byte) (*Change, error) {
	addr, err := netip.ParseAddr(address)
	if err != nil {
		return nil, fail(Invalid, "address", "%q is not an IP address", address)
	}
	item, err := body(spec, "a BGP peer")
	if err != nil {
		return nil, err
	}
	switch a := get(item, "address"); {
	case a == nil:
		item.Content = append([]*yaml.Node{strNode("address"), strNode(addr.String())}, item.Content...)
	case a.ShortTag() == "!!null":
		set(item, "address", strNode(addr.String()))
	case a.Kind != yaml.ScalarNode || !sameAddr(a.Value, addr):
		return nil, fail(Invalid, "address", "must be the address in the URL (%s) or left out", addr)
	}
	e, list, err := s.beginPeers()
	if err != nil {
		return nil, err
	}
	i := findPeer(list, addr)
	created := i < 0
	if created {
		i = len(list.Content)
		list.Content = append(list.Content, item)
	} else {
		list.Content[i] = item
	}
	prefix := fmt.Sprintf("bgp.peers[%d]", i)
	ch, err := e.finish(prefix, func(got *config.Config) *config.Config {
		want := *e.cfg
		b := *e.cfg.BGP
		b.Peers = slices.Clone(b.Peers)
		if got.BGP != nil && i < len(got.BGP.Peers) {
			if created {
				b.Peers = append(b.Peers, got.BGP.Peers[i])
			} else {
				b.Peers[i] = got.BGP.Peers[i]
			}
		}
		want.BGP = &b
		return &want
	})
	if err != nil {
		return nil, err
	}
	ch.Created = created
	ch.Summary = fmt.Sprintf("BGP peer %s replaced", addr)
	if created {
		ch.Summary = fmt.Sprintf("BGP peer %s added", addr)
	}
	return ch, nil
}

// DeletePeer removes the BGP peer at address; the last one stays (a bgp section needs
// a peer: remove the section and restart instead).
func (s *Store) DeletePeer(address string) (*Change, error) {
	addr, err := netip.ParseAddr(address)
	if err != nil {
		return nil, fail(Invalid, "address", "%q is not an IP address", address)
	}
	e, list, err := s.beginPeers()
	if err != nil {
		return nil, err
	}
	i := findPeer(list, addr)
	if i < 0 {
		return nil, fail(NotFound, "address", "no BGP peer %s", addr)
	}
	if len(list.Content) == 1 {
		return nil, fail(Conflict, "address", "%s is the only BGP peer: bgp.peers needs one (removing the bgp section needs a restart)", addr)
	}
	list.Content = slices.Delete(list.Content, i, i+1)
	ch, err := e.finish("bgp.peers", func(*config.Config) *config.Config {
		want := *e.cfg
		b := *e.cfg.BGP
		b.Peers = slices.DeleteFunc(slices.Clone(b.Peers), func(p config.Peer) bool { return p.Address == addr })
		want.BGP = &b
		return &want
	})
	if err != nil {
		return nil, err
	}
	ch.Summary = fmt.Sprintf("BGP peer %s removed", addr)
	return ch, nil
}

// beginPeers starts an edit of the peers list; a file without a bgp section has none
// to edit (adding the section needs a restart).
func (s *Store) beginPeers() (*edit, *yaml.Node, error) {
	e, err := s.beginTree()
	if err != nil {
		return nil, nil, err
	}
	if e.cfg.BGP == nil {
		return nil, nil, fail(Conflict, "", "this node has no bgp section; adding one takes effect only on restart")
	}
	list := get(get(e.doc.Content[0], "bgp"), "peers")
	if list == nil || list.Kind != yaml.SequenceNode {
		return nil, nil, fail(Failed, "", "bgp.peers is not a list the API can edit: edit the file and send SIGHUP instead")
	}
	return e, list, nil
}

// findPeer returns the index of the peer at addr in the peers list, or -1.
func findPeer(list *yaml.Node, addr netip.Addr) int {
	for i, p := range list.Content {
		if a := get(p, "address"); a != nil && a.Kind == yaml.ScalarNode && sameAddr(a.Value, addr) {
			return i
		}
	}
	return -1
}

func sameAddr(s string, addr netip.Addr) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a == addr
}
