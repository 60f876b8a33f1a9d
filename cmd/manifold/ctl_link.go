package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/config"
)

// defaultLinkAPI is where `manifold ctl link` looks without --api: a link's default
// link.api.
const defaultLinkAPI = "http://" + config.DefaultLinkAPI

// printLink shows a link and one line per tunnel.
func printLink(w io.Writer, st *wire.LinkStatus) {
	up := 0
	for _, t := range st.Tunnels {
		if t.InRoute {
			up++
		}
	}
	fmt.Fprintf(w, "link %s: %s → %s, %d/%d tunnels in the route (%s) to %s\n", st.Name, st.Local, st.Remote, up, len(st.Tunnels),
		or(st.Route, "not installed yet"), strings.Join(st.Prefixes, ", "))
	fmt.Fprintf(w, "public key %s\n\n", st.PublicKey)
	tw := table(w)
	fmt.Fprintln(tw, "TUNNEL\tDEVICE\tPORT\tFROM\tSTATE\tIN ROUTE\tTX\tRX\tTX PKTS\tRX PKTS\tHANDSHAKES\tPROBE RTT\tLOST\tCHANGES")
	for _, t := range st.Tunnels {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%.2fms\t%d/%d\t%d\n", t.Index, t.Device, t.Port, t.SourcePort, t.State, yesNo(t.InRoute),
			humanBytes(int64(t.TxBytes)), humanBytes(int64(t.RxBytes)), t.TxPackets, t.RxPackets, t.Handshakes, t.LastProbeRTTMillis, t.ProbesLost, t.ProbesSent, t.Transitions)
	}
	tw.Flush()
}
