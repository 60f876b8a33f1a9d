package bench

import (
	"fmt"
	"io"
	"net/netip"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/datapath"
	"github.com/manifoldlb/manifold/internal/datapath/dptest"
)

// The backend's side: what the tc decapsulation (bpf/decap.c) costs per packet, next to
// a tc program that only lets packets through, in the same run.

// DecapMethod says how the decapsulation figures are measured.
const DecapMethod = "Decapsulation: BPF_PROG_TEST_RUN of the backend's tc program (bpf/decap.c) " +
	"on a packet as an LB node sends it (a TCP segment with 6 bytes of payload to a VIP the " +
	"backend serves, in IPIP or GUE, over IPv4 or IPv6), one run per call as above, interleaved " +
	"with a tc program that returns TC_ACT_OK and does nothing else; ratios are run by run to it. " +
	"The test run builds the skb outside the timed part, so the times are the programs' own."

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
	cases := []dpCase{
		{name: "tc reference (TC_ACT_OK)", prog: ref.ReferenceTcOk, packets: [][]byte{dptest.IPIP(in4, dptest.NodeAddr4, dptest.Backend4(1))}},
		{name: "decap IPIP, IPv4", prog: d.Program(), packets: [][]byte{dptest.IPIP(in4, dptest.NodeAddr4, dptest.Backend4(1))}, target: decapTarget},
		{name: "decap GUE, IPv4", prog: d.Program(), packets: [][]byte{dptest.GUE(in4, dptest.NodeAddr4, dptest.Backend4(1), config.DefaultGUEPort)}, target: decapTarget},
		{name: "decap IPIP, IPv6", prog: d.Program(), packets: [][]byte{dptest.IPIP(in6, dptest.NodeAddr6, dptest.Backend6(1))}, target: decapTarget},
		{name: "decap GUE, IPv6", prog: d.Program(), packets: [][]byte{dptest.GUE(in6, dptest.NodeAddr6, dptest.Backend6(1), config.DefaultGUEPort)}, target: decapTarget},
	}
	figures, err := measureCases("decap", cases, 0, calls, runs)
	if err != nil {
		return nil, err
	}
	counts, err := d.Counters()
	if err != nil {
		return nil, err
	}
	if counts.NotVIP != 0 || counts.Errors != 0 || counts.IPIP4 == 0 || counts.GUE4 == 0 || counts.IPIP6 == 0 || counts.GUE6 == 0 {
		return nil, fmt.Errorf("decapsulation did not strip every packet: %+v", counts)
	}
	WriteDataplaneTable(w, Part{Figures: figures}, "decap", "× tc")
	return figures, nil
}
