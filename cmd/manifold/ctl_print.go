package main

// The tables of manifold ctl. ctl_test.go checks them against golden files.

import (
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/manifoldlb/manifold/internal/api/wire"
)

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

func printStatus(w io.Writer, st *wire.Status) {
	var ifaces []string
	for _, i := range st.Interfaces {
		ifaces = append(ifaces, fmt.Sprintf("%s (XDP %s)", i.Name, i.XDPMode))
	}
	tw := table(w)
	fmt.Fprintf(tw, "Node\t%s\n", st.Node)
	fmt.Fprintf(tw, "Interfaces\t%s\n", strings.Join(ifaces, ", "))
	fmt.Fprintf(tw, "Config\t%s\n", configLine(&st.Config))
	fmt.Fprintf(tw, "Reloads\t%d (%d failed)\n", st.Reloads, st.ReloadFailures)
	fmt.Fprintf(tw, "Flow table\t%d of %d entries (%s)\n", st.FlowTableEntries, st.FlowTableSize, percent(uint64(st.FlowTableEntries), uint64(st.FlowTableSize)))
	if f := st.Fleet; f != nil {
		fmt.Fprintf(tw, "Fleet\t%s\n", fleetLine(f))
	}
	if st.BGP == nil {
		fmt.Fprintf(tw, "BGP\toff (no bgp section: routing is left to the operator)\n")
	} else {
		fmt.Fprintf(tw, "BGP\tAS %d, router id %s\n", st.BGP.ASN, st.BGP.RouterID)
	}
	tw.Flush()

	if st.BGP != nil && len(st.BGP.Peers) > 0 {
		fmt.Fprintln(w)
		tw = table(w)
		fmt.Fprintln(tw, "PEER\tAS\tSTATE\tUP SINCE\tUPDATES SENT\tRECEIVED")
		for _, p := range st.BGP.Peers {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\n", p.Address, p.ASN, p.State, or(p.UpSince, "-"), p.UpdatesSent, p.UpdatesReceived)
		}
		tw.Flush()
	}

	fmt.Fprintln(w)
	tw = table(w)
	fmt.Fprintln(tw, "SERVICE\tVIP\tANNOUNCED\tBACKEND\tSTATE\tHEALTH\tWEIGHT\tPKT/S\tBYTES/S\tPACKETS\tBYTES")
	for _, s := range st.Services {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\t\t\t%s\t%s\t%d\t%d\n", s.Name, vipPort(&s), announced(&s), upCount(&s),
			rate(s.PacketsPerSecond), byteRate(s.BytesPerSecond), s.Packets, s.Bytes)
		for _, b := range s.Backends {
			fmt.Fprintf(tw, "\t\t\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\n", b.Address, b.State, healthWord(&b.Health), b.Weight,
				rate(b.PacketsPerSecond), byteRate(b.BytesPerSecond), b.Packets, b.Bytes)
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "\nDrops: %s\n", drops(st.Drops))
}

func printServices(w io.Writer, ss []wire.ServiceStatus) {
	tw := table(w)
	fmt.Fprintln(tw, "NAME\tVIP\tFORWARDING\tSCHEDULER\tBACKENDS\tANNOUNCED\tPKT/S\tBYTES/S\tPACKETS\tBYTES")
	for _, s := range ss {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", s.Name, vipPort(&s), s.Forwarding, s.Scheduler, upCount(&s),
			announced(&s), rate(s.PacketsPerSecond), byteRate(s.BytesPerSecond), s.Packets, s.Bytes)
	}
	tw.Flush()
}

func printBackends(w io.Writer, s *wire.ServiceStatus) {
	h := s.Spec.Health
	check := "none (every backend counts as healthy)"
	if h.Kind != "none" {
		check = fmt.Sprintf("%s every %s, timeout %s, rise %d, fall %d", h.Kind, h.Interval, h.Timeout, h.Rise, h.Fall)
	}
	fmt.Fprintf(w, "Service %s  %s  %s, %s\nHealth check: %s\nAnnounced: %s", s.Name, vipPort(s), s.Forwarding, s.Scheduler, check, announced(s))
	if s.Reason != "" {
		fmt.Fprintf(w, " (%s)", s.Reason)
	}
	fmt.Fprint(w, "\n\n")
	tw := table(w)
	fmt.Fprintln(tw, "ADDRESS\tSTATE\tWEIGHT\tHEALTH\tCHECKS\tFAILED\tLATENCY\tPKT/S\tBYTES/S\tPACKETS\tBYTES")
	var failing []string
	for _, b := range s.Backends {
		latency := "-"
		if b.Health.Check != "none" && b.Health.Checks > 0 {
			latency = fmt.Sprintf("%.1fms", b.Health.LatencySeconds*1000)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\t%s\t%d\t%d\n", b.Address, b.State, b.Weight, healthWord(&b.Health),
			b.Health.Checks, b.Health.Failures, latency, rate(b.PacketsPerSecond), byteRate(b.BytesPerSecond), b.Packets, b.Bytes)
		if b.Health.LastError != "" {
			failing = append(failing, fmt.Sprintf("  %s: %s", b.Address, b.Health.LastError))
		}
	}
	tw.Flush()
	if len(failing) > 0 {
		fmt.Fprintf(w, "\nLast check failed:\n%s\n", strings.Join(failing, "\n"))
	}
}

func printConfig(w io.Writer, c *wire.ConfigView) {
	fmt.Fprintf(w, "# %s\n", configLine(&c.ConfigInfo))
	if !c.InSync {
		fmt.Fprintln(w, "# The file on disk has edits the node has not loaded: send SIGHUP to apply them\n# (API writes are refused until then). Below is what the node runs.")
	}
	fmt.Fprint(w, c.YAML)
}

// printBackendChange shows a backend after drain, undrain or weight.
func printBackendChange(w io.Writer, s *wire.ServiceStatus, addr string) error {
	want, err := netip.ParseAddr(addr)
	if err != nil {
		return err
	}
	for _, b := range s.Backends {
		if a, err := netip.ParseAddr(b.Address); err == nil && a == want {
			fmt.Fprintf(w, "service %s: backend %s is %s, weight %d\n", s.Name, b.Address, b.State, b.Weight)
			return nil
		}
	}
	return fmt.Errorf("service %s has no backend %s any more", s.Name, addr)
}

func configLine(c *wire.ConfigInfo) string {
	sync := "in sync with the file on disk"
	if !c.InSync {
		sync = "the file on disk has edits not loaded yet (SIGHUP applies them)"
	}
	rev := c.Revision
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return fmt.Sprintf("%s, revision %s, %s", c.File, rev, sync)
}

func vipPort(s *wire.ServiceStatus) string {
	a, err := netip.ParseAddr(s.VIP)
	if err != nil {
		return fmt.Sprintf("%s:%d/%s", s.VIP, s.Port, s.Protocol)
	}
	return netip.AddrPortFrom(a, s.Port).String() + "/" + s.Protocol
}

// announced is the ANNOUNCED column; why is in `manifold ctl backends SERVICE`.
func announced(s *wire.ServiceStatus) string {
	if s.Announced {
		return "yes"
	}
	return "no"
}

func upCount(s *wire.ServiceStatus) string {
	up := 0
	for _, b := range s.Backends {
		if b.State == "up" {
			up++
		}
	}
	return fmt.Sprintf("%d/%d up", up, len(s.Backends))
}

func healthWord(h *wire.BackendHealth) string {
	switch {
	case h.Check == "none":
		return "-"
	case h.Up:
		return "up"
	case h.Checks == 0:
		return "pending"
	}
	return "down"
}

func drops(d map[string]uint64) string {
	var reasons []string
	for r, n := range d {
		if n > 0 {
			reasons = append(reasons, fmt.Sprintf("%s=%d", r, n))
		}
	}
	sort.Strings(reasons)
	if len(reasons) == 0 {
		return "none"
	}
	return strings.Join(reasons, " ")
}

func rate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func byteRate(v float64) string {
	units := []string{"B", "kB", "MB", "GB"}
	i := 0
	for v >= 1000 && i < len(units)-1 {
		v /= 1000
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", v)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

func percent(n, of uint64) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(of))
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// fleetLine says where a node stands against its fleet store.
func fleetLine(f *wire.FleetState) string {
	line := fmt.Sprintf("%s, revision %d", f.Prefix, f.AppliedRevision)
	switch {
	case !f.Reachable:
		line += fmt.Sprintf(", STORE UNREACHABLE, stale since %s (serving the last applied revision; writes refused)", or(f.StaleSince, "?"))
	case f.StoreRevision > f.AppliedRevision:
		line += fmt.Sprintf(", %d behind the store", f.StoreRevision-f.AppliedRevision)
	default:
		line += ", in sync with the store"
	}
	if f.ApplyError != "" {
		line += "; could not apply a later revision: " + f.ApplyError
	}
	if r := refusedNote(f.Refused); r != "" {
		line += "; " + r
	}
	return line
}

// refusedNote names the service documents a node refused (each service keeps its last
// good state), "" when none.
func refusedNote(refused []wire.FleetRefusal) string {
	if len(refused) == 0 {
		return ""
	}
	var parts []string
	for _, r := range refused {
		parts = append(parts, fmt.Sprintf("%s (revision %d: %s)", r.Service, r.Revision, r.Error))
	}
	return fmt.Sprintf("refused %d service documents, each service keeps its last good state: %s", len(refused), strings.Join(parts, "; "))
}

func printFleet(w io.Writer, f *wire.FleetStatus) {
	tw := table(w)
	fmt.Fprintf(tw, "Fleet\t%s on %s\n", f.Prefix, strings.Join(f.Endpoints, ", "))
	fmt.Fprintf(tw, "Revision\t%d\n", f.Revision)
	tw.Flush()
	fmt.Fprintln(w)
	tw = table(w)
	fmt.Fprintln(tw, "NODE\tSITE\tALIVE\tREVISION\tLAG\tAGREES\tBGP UP\tANNOUNCED\tUPDATED\tNOTE")
	for _, n := range f.Nodes {
		up := 0
		for _, p := range n.BGP {
			if p.Up {
				up++
			}
		}
		announced, services := 0, len(n.Services)
		if t := n.Totals; t != nil {
			announced, services = t.Announced, t.Services
		} else { // a record of a release before totals lists every service
			for _, s := range n.Services {
				if s.Announced {
					announced++
				}
			}
		}
		note := n.ApplyError
		if len(n.Refused) > 0 {
			names := make([]string, len(n.Refused))
			for i, r := range n.Refused {
				names[i] = r.Service
			}
			note = strings.TrimSpace(note + " refused: " + strings.Join(names, ", "))
		}
		if n.StaleSince != "" {
			note = strings.TrimSpace("store unreachable since " + n.StaleSince + " " + note)
		}
		if t := n.Truncated; t != nil {
			note = strings.TrimSpace(note + fmt.Sprintf(" record cut to its bound: %d services, %d refusals left out", t.Services+t.TunnelServices, t.Refused))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%d/%d\t%d/%d\t%s\t%s\n", n.Name, n.Site, yesNo(n.Alive), n.AppliedRevision, n.Lag,
			yesNo(n.Agrees), up, len(n.BGP), announced, services, or(n.UpdatedAt, "-"), or(note, "-"))
	}
	tw.Flush()
}

func printSteering(w io.Writer, st *wire.SteeringStatus) {
	tw := table(w)
	fmt.Fprintf(tw, "Site\t%s (this node's: it applies these shares)\n", st.Site)
	for _, s := range st.Services {
		line := fmt.Sprintf("round %d by %s at %s", s.Round, s.Leader, s.At)
		if s.Decision.Note != "" {
			line += "; " + s.Decision.Note
		}
		fmt.Fprintf(tw, "%s\t%s\n", s.Service, line)
	}
	tw.Flush()
	if len(st.Services) == 0 {
		fmt.Fprintln(w, "No shares yet: no steering controller has decided (backends keep their own weights, tunnel services' streams go to every connector).")
		return
	}
	fmt.Fprintln(w)
	tw = table(w)
	fmt.Fprintln(tw, "SERVICE\tSITE\tORIGIN\tSHARE\tTARGET\tLOAD/CAPACITY\tRTT\tREASON")
	for _, s := range st.Services {
		for _, site := range s.Decision.Sites {
			for _, sh := range site.Shares {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f%%\t%.1f%%\t%.0f/%.0f\t%.0f ms\t%s\n", s.Service, site.Site, sh.Origin,
					100*sh.Share, 100*sh.Target, sh.Load, sh.Capacity, sh.RTTMs, sh.Reason)
			}
		}
	}
	tw.Flush()
}

func printFlows(w io.Writer, v *wire.FlowsView) {
	if len(v.Flows) == 0 {
		fmt.Fprintf(w, "No flows (table of %d entries).\n", v.Size)
		return
	}
	tw := table(w)
	fmt.Fprintln(tw, "PROTO\tCLIENT\tVIP\tSERVICE\tBACKEND\tIDLE")
	for _, f := range v.Flows {
		idle := "-"
		if f.IdleSeconds != nil {
			idle = (time.Duration(*f.IdleSeconds * float64(time.Second))).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Protocol, f.Client, f.VIP, f.Service, f.Backend, idle)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d of %d flows shown (table of %d entries).\n", len(v.Flows), v.Total, v.Size)
}

func printTunnels(w io.Writer, st *wire.TunnelsStatus) {
	fmt.Fprintf(w, "Tunnel edge on %s (QUIC and TCP)\n\n", st.Listen)
	tw := table(w)
	fmt.Fprintln(tw, "SERVICE\tVIP\tCONNECTORS\tIN USE/CAPACITY\tANNOUNCED")
	for _, s := range st.Services {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d/%d\t%s\n", s.Name, net.JoinHostPort(s.VIP, strconv.Itoa(int(s.Port))), s.Connectors, s.Open, s.Capacity, yesNo(s.Announced))
	}
	tw.Flush()
	fmt.Fprintln(w)
	if len(st.Tunnels) == 0 {
		fmt.Fprintln(w, "No connector attached.")
	} else {
		tw = table(w)
		fmt.Fprintln(tw, "CONNECTOR\tTUNNEL\tFROM\tTOKEN\tSERVICES (IN USE/CAPACITY)\tSTREAMS OPEN\tSTREAMS\tTO ORIGIN\tFROM ORIGIN\tRTT\tSTATE")
		for _, t := range st.Tunnels {
			var shares []string
			for _, s := range t.Services {
				name := s.Name
				if s.Origin != "" {
					name += "@" + s.Origin // the origin the connector serves it for
				}
				shares = append(shares, fmt.Sprintf("%s %d/%d", name, s.Open, s.Capacity))
			}
			state := "up since " + t.Since.UTC().Format(time.RFC3339)
			if t.Draining {
				state = "draining"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s/%s\t%s\t%s\t%d/%d\t%d\t%s\t%s\t%.1f ms\t%s\n", t.Connector, t.ID, t.Remote, t.Transport, t.Token, strings.Join(shares, ", "),
				t.StreamsOpen, t.StreamLimit, t.Streams, humanBytes(t.BytesToOrigin), humanBytes(t.BytesFromOrigin),
				float64(t.RTT)/float64(time.Millisecond), state)
		}
		tw.Flush()
	}
	c := st.Counters
	var refused []string
	for _, reason := range slices.Sorted(maps.Keys(c.Refused)) {
		refused = append(refused, fmt.Sprintf("%s %d", reason, c.Refused[reason]))
	}
	fmt.Fprintf(w, "\nAttached %d, gone %d, refused: %s\nStreams %d (retried %d), clients refused %d (no capacity), %d (per source), closed idle %d, accept errors %d\n",
		c.Attached, c.Gone, strings.Join(refused, ", "), c.Streams, c.StreamRetries, c.ClientsRefused,
		c.ClientsRefusedPerSource, c.ClientsIdle, c.AcceptErrors)
}

// humanBytes writes a byte count in binary units.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
