package bench

import (
	"fmt"
	"io"
	"net/netip"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/datapath/dptest"
)

// The backend's side: what the decapsulation (bpf/decap.c) costs per packet at each of
// its hooks, tc and XDP, next to a program of the same hook that only lets packets
// through, in the same run.

// DecapMethod says how the decapsulation figures are measured.
const DecapMethod = "Decapsulation: BPF_PROG_TEST_RUN of the backend's programs (bpf/decap.c), " +
	"tc and XDP, on a packet as an LB node sends it (a TCP segment with 6 bytes of payload to a VIP " +
	"the backend serves, in IPIP or GUE, over IPv4 or IPv6), one run per call as above, all cases " +
	"interleaved with a tc program that returns TC_ACT_OK and an XDP program that returns XDP_PASS, " +
	"each doing nothing else, and with the tc floor, a tc program that only calls bpf_skb_adjust_room to take " +
	"20 bytes off after the MAC header (on the IPIP IPv4 packet): tc has no other way to shorten a packet " +
	"at its front, so no tc decapsulation can cost less; a tc case's ratios are run by run to the tc one, an XDP case's to the " +
	"XDP one. The test run builds the skb or xdp_buff outside the timed part, so the times are the " +
	"programs' own."

// tcStripName is the row of the tc floor: bpf_skb_adjust_room alone, which every tc
// decapsulation calls.
const tcStripName = "tc floor: bpf_skb_adjust_room alone, IPv4"

// decapTarget is issue 18's bound on decapsulation, in multiples of the trivial program.
const decapTarget = 1.5

const tcActShot = 2 // TC_ACT_SHOT

// Decap measures the decapsulation program against the trivial tc program over `runs`
// runs of `calls` calls each, prints a table to w and returns the figures (section
// "decap").
func Decap(w io.Writer, calls, runs int) ([]Figure, error) {
	d, err := datapath.LoadDecap(config.DefaultGUEPort)
	if err != nil {
		return nil, fmt.Errorf("load the decapsulation program (needs root): %w", err)
	}
	defer d.Close()
	for _, vip := range []netip.Addr{benchVIP4, benchVIP6} {
		if err := d.AddVIP(vip); err != nil {
			return nil, err
		}
	}
	var ref referenceObjects
	if err := loadReferenceObjects(&ref, nil); err != nil {
		return nil, err
	}
	defer ref.Close()
	seg := func(vip netip.Addr) dptest.Packet {
		client := dptest.Client4
		if vip.Is6() {
			client = dptest.Client6
		}
		return dptest.Packet{Src: client, Dst: vip, SPort: 40000, DPort: 80, Flags: dptest.ACK, Payload: make([]byte, 6)}
	}
	in4, in6 := seg(benchVIP4), seg(benchVIP6)
	packets := []struct {
		name string
		pkt  []byte
	}{
		{"IPIP, IPv4", dptest.IPIP(in4, dptest.NodeAddr4, dptest.Backend4(1))},
		{"GUE, IPv4", dptest.GUE(in4, dptest.NodeAddr4, dptest.Backend4(1), config.DefaultGUEPort)},
		{"IPIP, IPv6", dptest.IPIP(in6, dptest.NodeAddr6, dptest.Backend6(1))},
		{"GUE, IPv6", dptest.GUE(in6, dptest.NodeAddr6, dptest.Backend6(1), config.DefaultGUEPort)},
	}
	// the tc cases, then the XDP ones, each behind its hook's trivial program
	cases := []dpCase{
		{name: "tc reference (TC_ACT_OK)", prog: ref.ReferenceTcOk, packets: [][]byte{packets[0].pkt}},
		{name: tcStripName, prog: ref.ReferenceTcStrip, packets: [][]byte{packets[0].pkt}},
	}
	for _, p := range packets {
		cases = append(cases, dpCase{name: "decap " + p.name, prog: d.Program(), packets: [][]byte{p.pkt}, target: decapTarget})
	}
	xdpRef := len(cases)
	cases = append(cases, dpCase{name: "xdp reference (XDP_PASS)", prog: ref.ReferencePass, packets: [][]byte{packets[0].pkt}})
	for _, p := range packets {
		cases = append(cases, dpCase{name: "xdp decap " + p.name, prog: d.XDPProgram(), packets: [][]byte{p.pkt}, target: decapTarget})
	}
	// one interleaved measurement; measureCases compares every case with the first,
	// the XDP ones are compared again, with their own reference
	figures, err := measureCases("decap", cases, 0, calls, runs)
	if err != nil {
		return nil, err
	}
	// each tc decapsulation also against the floor: what it costs beyond the helper
	for ci := 2; ci < xdpRef; ci++ {
		figures[2*ci].Compare(figures[2], "", 0)
		figures[2*ci+1].Compare(figures[3], "", 0)
	}
	for ci := xdpRef; ci < len(cases); ci++ {
		med, mean := &figures[2*ci], &figures[2*ci+1]
		med.Compared, mean.Compared = nil, nil
		med.Compare(figures[2*xdpRef], "<=", cases[ci].target)
		mean.Compare(figures[2*xdpRef+1], "<=", 0)
	}
	counts, err := d.Counters()
	if err != nil {
		return nil, err
	}
	if counts.NotVIP != 0 || counts.Errors != 0 || counts.IPIP4 == 0 || counts.GUE4 == 0 || counts.IPIP6 == 0 || counts.GUE6 == 0 {
		return nil, fmt.Errorf("decapsulation did not strip every packet: %+v", counts)
	}
	WriteDataplaneTable(w, Part{Figures: figures[:2*xdpRef]}, "decap", "× tc")
	fmt.Fprintln(w)
	WriteDataplaneTable(w, Part{Figures: figures[2*xdpRef:]}, "decap", "× xdp")
	return figures, nil
}
