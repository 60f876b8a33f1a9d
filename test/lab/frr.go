package lab

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// FRR as the lab's router, the other routing suite docs/bgp.md gives a worked example
// for: zebra (the FIB) and bgpd, in the router namespace, as the frr user.

// CheckFRR returns what is missing of FRR: its programs, or the frr user its
// package creates and its daemons run as.
func CheckFRR() error {
	if err := hostprog.Check(hostprog.Zebra, hostprog.BGPd, hostprog.BFDd, hostprog.Vtysh); err != nil {
		return err
	}
	_, err := user.Lookup("frr")
	return err
}

// FRRConfig renders bgpd's configuration: one peer group for the LB nodes, multipath
// in both families (docs/bgp.md's example).
func FRRConfig(peers []RouterPeer, o RouterOptions) string {
	var b strings.Builder
	fmt.Fprintf(&b, "frr defaults traditional\nhostname router\nlog stdout informational\n!\nrouter bgp %d\n", RouterASN)
	b.WriteString(" bgp router-id 10.255.255.1\n no bgp ebgp-requires-policy\n")
	b.WriteString(" neighbor MANIFOLD peer-group\n")
	if len(peers) > 0 {
		fmt.Fprintf(&b, " neighbor MANIFOLD remote-as %d\n", peers[0].ASN)
		if peers[0].Password != "" {
			fmt.Fprintf(&b, " neighbor MANIFOLD password %s\n", peers[0].Password)
		}
	}
	if o.HoldTime > 0 {
		hold := int(o.HoldTime / time.Second)
		fmt.Fprintf(&b, " neighbor MANIFOLD timers %d %d\n", max(1, hold/3), hold)
	}
	b.WriteString(" neighbor MANIFOLD timers connect 1\n")
	for _, p := range peers {
		fmt.Fprintf(&b, " neighbor %s peer-group MANIFOLD\n", p.Address)
		if p.BFD && o.BFD != nil {
			fmt.Fprintf(&b, " neighbor %s bfd profile manifold\n", p.Address)
		}
	}
	b.WriteString(" address-family ipv4 unicast\n  maximum-paths 16\n exit-address-family\n")
	b.WriteString(" address-family ipv6 unicast\n  neighbor MANIFOLD activate\n  maximum-paths 16\n exit-address-family\n!\n")
	return b.String()
}

// BFDConfig renders bfdd's configuration: one profile with the options' timers.
func BFDConfig(o RouterOptions) string {
	ms := o.BFD.Interval.Milliseconds()
	return fmt.Sprintf("hostname router\nlog stdout informational\n!\nbfd\n profile manifold\n  receive-interval %d\n  transmit-interval %d\n  detect-multiplier %d\n exit\nexit\n!\n",
		ms, ms, o.BFD.Multiplier)
}

// frrDir holds the FRR files of the lab of prefix.
func frrDir(prefix string) string { return filepath.Join(os.TempDir(), prefix+"-frr") }

// FRR is zebra, bgpd and (with BFD) bfdd running in the router namespace.
type FRR struct {
	Zebra, BGPd, BFDd *Process
	dir               string
}

// StartFRR runs zebra and bgpd in the router namespace with L4 ECMP hashing, and
// returns once bgpd answers on its vty socket. Every peer must share one ASN and one
// password (they form one peer group).
func (l *Lab) StartFRR(peers []RouterPeer, o RouterOptions) (*FRR, error) {
	if err := l.Router.Sysctl(map[string]string{
		"net.ipv4.fib_multipath_hash_policy": "1",
		"net.ipv6.fib_multipath_hash_policy": "1",
	}); err != nil {
		return nil, err
	}
	// The daemons run as frr, which cannot enter a test's private temporary directory:
	// their files live in a directory of the lab's prefix, replaced on every start.
	dir := frrDir(l.Prefix)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	files := map[string]string{
		"zebra.conf": "hostname router\nlog stdout informational\n",
		"bgpd.conf":  FRRConfig(peers, o),
	}
	if o.BFD != nil {
		files["bfdd.conf"] = BFDConfig(o)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o640); err != nil {
			return nil, err
		}
	}
	// the daemons drop to the frr user: it must own their directory
	u, err := user.Lookup("frr")
	if err != nil {
		return nil, err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	chown := []string{dir}
	for name := range files {
		chown = append(chown, filepath.Join(dir, name))
	}
	for _, p := range chown {
		if err := os.Chown(p, uid, gid); err != nil {
			return nil, err
		}
	}
	common := func(daemon string) []string {
		return []string{"-N", l.Prefix, "-f", filepath.Join(dir, daemon+".conf"),
			"-i", filepath.Join(dir, daemon+".pid"), "-z", filepath.Join(dir, "zserv.api"),
			"--vty_socket", dir, "-u", "frr", "-g", "frr"}
	}
	f := &FRR{dir: dir}
	if f.Zebra, err = l.Start(l.Router, "zebra", hostprog.Zebra, common("zebra")...); err != nil {
		return nil, err
	}
	if err := f.Zebra.WaitReady(10*time.Second, func() error {
		_, err := os.Stat(filepath.Join(dir, "zserv.api"))
		return err
	}); err != nil {
		return f, fmt.Errorf("zebra: %w", err)
	}
	if o.BFD != nil {
		// before bgpd, so that its sessions find BFD there from the start
		ctl := filepath.Join(dir, "bfdd.sock")
		if f.BFDd, err = l.Start(l.Router, "bfdd", hostprog.BFDd, append(common("bfdd"), "--bfdctl", ctl)...); err != nil {
			return f, err
		}
		if err := f.BFDd.WaitReady(10*time.Second, func() error { _, err := os.Stat(ctl); return err }); err != nil {
			return f, fmt.Errorf("bfdd: %w", err)
		}
	}
	if f.BGPd, err = l.Start(l.Router, "bgpd", hostprog.BGPd, append(common("bgpd"), "-p", "179")...); err != nil {
		return f, err
	}
	if err := f.BGPd.WaitReady(10*time.Second, func() error { _, err := f.Show("bgp summary"); return err }); err != nil {
		return f, fmt.Errorf("bgpd: %w", err)
	}
	return f, nil
}

// Show runs `vtysh -c "show ARGS"` against the lab's daemons.
func (f *FRR) Show(args string) (string, error) {
	out, err := hostprog.Command(hostprog.Vtysh, "--vty_socket", f.dir, "-c", "show "+args).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("vtysh show %s: %w: %s", args, err, out)
	}
	return string(out), nil
}
