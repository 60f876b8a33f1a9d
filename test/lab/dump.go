package lab

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// TB is the part of *testing.T that Dump uses.
type TB interface {
	Helper()
	Failed() bool
	Logf(format string, args ...any)
}

// Dump logs the state of the whole lab (see WriteState) if t has failed. Register it
// with t.Cleanup after the lab's own teardown, so that it runs before it.
func (l *Lab) Dump(t TB) {
	t.Helper()
	if !t.Failed() {
		return
	}
	var b strings.Builder
	l.WriteState(&b)
	t.Logf("state of lab %s:\n%s", l.Prefix, b.String())
}

// WriteState writes, for every namespace, its addresses, routes, links (with their XDP
// programs and counters), neighbours, tc ingress filters and BPF attachments, then the
// log of every process the lab started.
func (l *Lab) WriteState(w io.Writer) {
	for _, h := range append([]*Host{l.Router}, l.Hosts...) {
		if h == nil {
			continue
		}
		fmt.Fprintf(w, "\n===== %s (%s) =====\n", h.NS, h.Kind)
		type command struct {
			prog hostprog.Program
			args []string
		}
		cmds := []command{
			{hostprog.IP, []string{"addr"}},
			{hostprog.IP, []string{"route"}},
			{hostprog.IP, []string{"-6", "route"}},
			{hostprog.IP, []string{"-d", "-s", "link"}},
			{hostprog.IP, []string{"neigh"}},
			{hostprog.IP, []string{"nexthop"}}, // a site-to-site link's groups
		}
		var links []string
		if ls, err := h.nl.LinkList(); err == nil {
			for _, link := range ls {
				if name := link.Attrs().Name; name != "lo" {
					links = append(links, name)
					cmds = append(cmds, command{hostprog.TC, []string{"filter", "show", "dev", name, "ingress"}})
				}
			}
		}
		// tc shows the classic filters; bpftool also shows tcx and netkit attachments.
		cmds = append(cmds, command{hostprog.Bpftool, []string{"net", "show"}})
		for _, c := range cmds {
			out, err := hostprog.InNetns(context.Background(), h.NS, c.prog, c.args...).CombinedOutput()
			fmt.Fprintf(w, "$ %s %s\n%s", c.prog.Name(), strings.Join(c.args, " "), out)
			if err != nil {
				fmt.Fprintf(w, "(%v)\n", err)
			}
		}
		for _, name := range links {
			progs, err := h.TCXIngress(name)
			if err != nil {
				fmt.Fprintf(w, "tcx ingress of %s: %v\n", name, err)
			} else if len(progs) > 0 {
				fmt.Fprintf(w, "tcx ingress of %s: %s\n", name, strings.Join(progs, ", "))
			}
		}
	}
	for _, p := range l.procs {
		state := "running"
		if !p.Running() {
			state = fmt.Sprintf("exited: %v", p.ExitErr())
		}
		fmt.Fprintf(w, "\n===== log of %s in %s (pid %d, %s) =====\n%s\n", p.Name, p.Host.NS, p.Pid(), state, tail(p.Log(), 300))
	}
}
