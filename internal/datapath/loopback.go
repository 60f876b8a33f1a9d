package datapath

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Loopback puts the VIPs of tunnel services on lo. The XDP program does not know
// those VIPs, so their packets pass to the stack, which takes them as its own once
// the VIP is an address of the node; the tunnel edge's listeners accept them there.
// An address already on lo when it is wanted (the operator's) is left as found:
// Loopback removes only what it added.
type Loopback struct {
	nl    *netlink.Handle
	log   *slog.Logger
	added map[netip.Addr]bool
}

// NewLoopback writes through nl (nil: the calling thread's network namespace).
func NewLoopback(nl *netlink.Handle, log *slog.Logger) *Loopback {
	if nl == nil {
		nl = &netlink.Handle{} // the package's handle: sockets of the current namespace
	}
	return &Loopback{nl: nl, log: log, added: map[netip.Addr]bool{}}
}

// Set makes the VIPs it added exactly vips: it adds those missing, then removes those
// no longer wanted. An address it cannot add fails Set and leaves lo as it was (the
// addresses this call added are taken back). A removal that fails is logged and
// tried again at the next Set: the VIP only lingers.
func (l *Loopback) Set(vips []netip.Addr) error {
	lo, err := l.nl.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	want := map[netip.Addr]bool{}
	var added []netip.Addr
	for _, vip := range vips {
		if want[vip] {
			continue
		}
		want[vip] = true
		if l.added[vip] {
			continue
		}
		addr := hostAddr(vip)
		// usable at once: without it an IPv6 address stays tentative until the
		// kernel's duplicate address detection work runs (lo skips the detection,
		// but later), and the edge's listener, bound right after, fails to bind
		addr.Flags = unix.IFA_F_NODAD
		err := l.nl.AddrAdd(lo, addr)
		if errors.Is(err, unix.EEXIST) {
			continue // not ours: never removed
		}
		if err != nil {
			for _, a := range added {
				l.remove(lo, a)
			}
			return fmt.Errorf("add %s to lo: %w", vip, err)
		}
		l.added[vip] = true
		added = append(added, vip)
	}
	for vip := range l.added { // deleting while ranging is allowed
		if !want[vip] {
			l.remove(lo, vip)
		}
	}
	return nil
}

// Release removes every VIP it added (the node stops).
func (l *Loopback) Release() {
	if err := l.Set(nil); err != nil {
		l.log.Error("remove tunnel VIPs from lo", "err", err)
	}
}

func (l *Loopback) remove(lo netlink.Link, vip netip.Addr) {
	if err := l.nl.AddrDel(lo, hostAddr(vip)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
		l.log.Error("remove tunnel VIP from lo", "vip", vip, "err", err)
		return
	}
	delete(l.added, vip)
}

func hostAddr(a netip.Addr) *netlink.Addr {
	return &netlink.Addr{IPNet: netlink.NewIPNet(a.AsSlice())}
}
