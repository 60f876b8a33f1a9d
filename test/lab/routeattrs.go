package lab

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
)

// RouteAttrs are the BGP attributes a router shows for one path, written alike for
// BIRD and FRR: the AS path ("65001 65001"), the MED ("" when absent), the standard
// communities ("65001:100 65535:65281", sorted, well-known ones as numbers) and the
// large ones ("65001:1:2", sorted).
type RouteAttrs struct {
	ASPath, MED, Communities, LargeCommunities string
}

// wellKnown are FRR's names of the well-known communities.
var wellKnown = map[string]string{"no-export": "65535:65281", "noExport": "65535:65281", "no-advertise": "65535:65282",
	"noAdvertise": "65535:65282", "no-peer": "65535:65284", "noPeer": "65535:65284", "blackhole": "65535:666"}

func sortedWords(words []string) string {
	slices.Sort(words)
	return strings.Join(words, " ")
}

var birdTuple = regexp.MustCompile(`\(([^)]*)\)`)

// birdTuples turns BIRD's "(65001,100) (65001, 1, 2)" into sorted "65001:100 65001:1:2".
func birdTuples(s string) string {
	var out []string
	for _, m := range birdTuple.FindAllStringSubmatch(s, -1) {
		out = append(out, strings.ReplaceAll(strings.ReplaceAll(m[1], " ", ""), ",", ":"))
	}
	return sortedWords(out)
}

// RouteAttrs returns the attributes of BIRD's routes to prefix, by next hop.
func (b *Bird) RouteAttrs(prefix netip.Prefix) (map[netip.Addr]RouteAttrs, string, error) {
	out, err := b.Show("route", "all", "for", prefix.String())
	if err != nil {
		return nil, "", err
	}
	routes := map[netip.Addr]RouteAttrs{}
	var cur RouteAttrs
	var nh netip.Addr
	flush := func() {
		if nh.IsValid() {
			routes[nh] = cur
		}
		cur, nh = RouteAttrs{}, netip.Addr{}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "unicast [") {
			flush()
			continue
		}
		key, value, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok {
			continue
		}
		switch key {
		case "BGP.next_hop":
			nh, _ = netip.ParseAddr(strings.Fields(value)[0])
		case "BGP.as_path":
			cur.ASPath = value
		case "BGP.med":
			cur.MED = value
		case "BGP.community":
			cur.Communities = birdTuples(value)
		case "BGP.large_community":
			cur.LargeCommunities = birdTuples(value)
		}
	}
	flush()
	return routes, out, nil
}

// RouteAttrs returns the attributes of bgpd's paths to prefix, by next hop.
func (f *FRR) RouteAttrs(prefix netip.Prefix) (map[netip.Addr]RouteAttrs, string, error) {
	family := "ipv4"
	if prefix.Addr().Is6() {
		family = "ipv6"
	}
	out, err := f.Show(fmt.Sprintf("bgp %s unicast %s json", family, prefix))
	if err != nil {
		return nil, "", err
	}
	var doc struct {
		Paths []struct {
			ASPath    struct{ String string }  `json:"aspath"`
			MED       *uint32                  `json:"metric"`
			Community *struct{ String string } `json:"community"`
			Large     *struct{ String string } `json:"largeCommunity"`
			Nexthops  []struct{ IP string }    `json:"nexthops"`
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		return nil, out, fmt.Errorf("vtysh: %w", err)
	}
	routes := map[netip.Addr]RouteAttrs{}
	for _, p := range doc.Paths {
		if len(p.Nexthops) == 0 {
			continue
		}
		nh, err := netip.ParseAddr(p.Nexthops[0].IP)
		if err != nil {
			return nil, out, err
		}
		a := RouteAttrs{ASPath: p.ASPath.String}
		if p.MED != nil {
			a.MED = fmt.Sprint(*p.MED)
		}
		if p.Community != nil {
			var words []string
			for _, w := range strings.Fields(p.Community.String) {
				words = append(words, cmp.Or(wellKnown[w], w))
			}
			a.Communities = sortedWords(words)
		}
		if p.Large != nil {
			a.LargeCommunities = sortedWords(strings.Fields(p.Large.String))
		}
		routes[nh] = a
	}
	return routes, out, nil
}

// BFDSessionsUp counts the router's BFD sessions that are up, whichever suite runs it.
func (a *ActiveActive) BFDSessionsUp() (int, string, error) {
	var out string
	var err error
	if a.FRR != nil {
		out, err = a.FRR.Show("bfd peers brief")
	} else {
		out, err = a.Bird.Show("bfd", "sessions")
	}
	if err != nil {
		return 0, out, err
	}
	up := 0
	for _, line := range strings.Split(out, "\n") {
		if slices.Contains(strings.Fields(line), "up") || slices.Contains(strings.Fields(line), "Up") {
			up++
		}
	}
	return up, out, nil
}
