package main

import (
	"fmt"
	"io"
	"strings"
)

// manPage writes manifold(1) in roff, drawn from the command tables like the usage and
// the completion, so the manual cannot miss a command. The Debian package installs it.
func manPage(w io.Writer) error {
	esc := func(s string) string {
		s = strings.ReplaceAll(s, `\`, `\e`)
		s = strings.ReplaceAll(s, "-", `\-`)
		if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
			s = `\&` + s
		}
		return s
	}
	var b strings.Builder
	b.WriteString(`.TH MANIFOLD 1 "" "manifold ` + esc(version) + `" "User Commands"
.SH NAME
manifold \- active\-active XDP load balancer: node, backend agent, fleet, steering, tunnels, links
.SH SYNOPSIS
`)
	for _, c := range commands {
		fmt.Fprintf(&b, ".B manifold %s\n", esc(c.name))
		if c.synopsis != "" {
			fmt.Fprintf(&b, "%s\n", esc(c.synopsis))
		}
		b.WriteString(".br\n")
	}
	b.WriteString(`.SH DESCRIPTION
manifold gives a service one virtual IP that every node announces over BGP. The router
spreads flows over the nodes with ECMP; each node sends each flow to a healthy backend
chosen by Maglev consistent hashing, in XDP, encapsulated (IPIP, GUE) so that the backend
answers the client directly, or translated (NAT). One binary runs every part; the
manual in docs/ of the source repository is the full reference.
.SH COMMANDS
`)
	for _, c := range commands {
		fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", esc(strings.TrimSpace(c.name+" "+c.synopsis)), esc(c.summary))
	}
	b.WriteString(".SS ctl commands\n")
	for _, c := range ctlCommands {
		fmt.Fprintf(&b, ".TP\n.B ctl %s\n%s\n", esc(strings.TrimSpace(c.name+" "+c.args)), esc(c.summary))
	}
	b.WriteString(`.SH SIGNALS
.TP
.B SIGHUP
run, backend: reload the config file atomically; a bad file changes nothing.
.TP
.B SIGTERM, SIGINT
run: withdraw every VIP, keep forwarding for bgp.drain_time, then exit. connect: drain
(no new streams, the open ones finish). Every part removes what it set up.
.SH FILES
.TP
.I /etc/manifold/node.yaml, backend.yaml, steer.yaml, connect.yaml, link.yaml
the config of each part, as the systemd units read them (manifold\-node.service, ...).
.TP
.I /usr/share/doc/manifold/examples/
an example of each.
.SH ENVIRONMENT
.TP
.B MANIFOLD_API, MANIFOLD_API_TOKEN
ctl: the node API's URL and bearer token.
.SH SEE ALSO
.BR systemctl (1),
.BR bird (8),
.BR bpftool (8)
`)
	_, err := io.WriteString(w, b.String())
	return err
}
