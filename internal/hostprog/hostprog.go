// Package hostprog is the one registry of the programs that manifold's tests, demo,
// benchmarks and build run on the host, each with the Debian package that installs it.
// Code runs them only through Command, CommandContext and InNetns, so a program that
// is not in the table cannot be run (TestNoDirectExec enforces it), and `make deps`
// installs exactly the packages of the table (it prints them with ./debpkgs), so a
// program in the table cannot be missing from a machine that ran it.
//
// Adding a program is one line in the table below.
package hostprog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
)

// A Program is an executable that the code runs. Its fields are unexported so that
// outside this package a Program comes only from the table or from Built.
type Program struct {
	name string
	// path is absolute for a Debian program: it is where the package installs it, so
	// that PATH (a pyenv shim, a locally built copy) cannot substitute another.
	path string
	// pkg is the Debian package that installs path; "" for Go, Built and crates.
	pkg string
	// crate is the crates.io package that installs path (a benchmark's reference that
	// Debian does not package); "" for the others.
	crate string
	built bool // a binary this repository builds (bin/manifold)
}

// A File is something the programs load rather than run, or a script of the
// repository uses, that is also installed from a Debian package.
type File struct {
	Path    string
	Package string
	Use     string // who needs it, for the reader
}

var programs []Program

func debian(name, path, pkg string) Program {
	p := Program{name: name, path: path, pkg: pkg}
	programs = append(programs, p)
	return p
}

// The table. Paths are those of Debian 12 with the merged /usr it installs by default.
var (
	Bash      = debian("bash", "/bin/bash", "bash") // the completion test sources the script
	Bird      = debian("bird", "/usr/sbin/bird", "bird2")
	Birdc     = debian("birdc", "/usr/sbin/birdc", "bird2")
	BGPd      = debian("bgpd", "/usr/lib/frr/bgpd", "frr")
	BFDd      = debian("bfdd", "/usr/lib/frr/bfdd", "frr")                     // FRR's BFD, beside bgpd in the lab
	Buildah   = debian("buildah", "/usr/bin/buildah", "buildah")               // `make image` and its test: the container image, offline
	ExaBGP    = debian("exabgp", "/usr/sbin/python3-exabgp", "python3-exabgp") // the lab's plain peer (the speaker of the dissertation's topology)
	GoBGPd    = debian("gobgpd", "/usr/bin/gobgpd", "gobgpd")                  // the lab's route reflector (add-path)
	GoBGP     = debian("gobgp", "/usr/bin/gobgp", "gobgpd")                    // gobgpd's CLI
	Bpftool   = debian("bpftool", "/usr/sbin/bpftool", "bpftool")
	Clang     = debian("clang", "/usr/bin/clang", "clang")          // run by bpf2go in `make generate`
	Chromium  = debian("chromium", "/usr/bin/chromium", "chromium") // the status page's test renders it headless
	Curl      = debian("curl", "/usr/bin/curl", "curl")
	Dpkg      = debian("dpkg", "/usr/bin/dpkg", "dpkg")
	DpkgDeb   = debian("dpkg-deb", "/usr/bin/dpkg-deb", "dpkg")  // make deb
	Lintian   = debian("lintian", "/usr/bin/lintian", "lintian") // the package test
	Kubectl   = debian("kubectl", "/usr/bin/kubectl", "kubectl") // applies deploy/kubernetes in the Kubernetes tests, as the README tells a user to
	Etcd      = debian("etcd", "/usr/bin/etcd", "etcd-server")   // the fleet store's members in tests and the lab; the store of the Kubernetes tests' API server
	Ethtool   = debian("ethtool", "/usr/sbin/ethtool", "ethtool")
	HAProxy   = debian("haproxy", "/usr/sbin/haproxy", "haproxy")
	IP        = debian("ip", "/usr/sbin/ip", "iproute2")
	Iperf3    = debian("iperf3", "/usr/bin/iperf3", "iperf3")       // the benchmarks of the site-to-site link and the tunnels
	LLVMStrip = debian("llvm-strip", "/usr/bin/llvm-strip", "llvm") // run by bpf2go in `make generate`
	Man       = debian("man", "/usr/bin/man", "man-db")             // the manual page's test renders it
	Nft       = debian("nft", "/usr/sbin/nft", "nftables")
	Nginx     = debian("nginx", "/usr/sbin/nginx", "nginx")
	OpenSSL   = debian("openssl", "/usr/bin/openssl", "openssl") // the docs' quick starts make their certificates with it, and the quick start test runs them
	Ping      = debian("ping", "/usr/bin/ping", "iputils-ping")
	Promtool  = debian("promtool", "/usr/bin/promtool", "prometheus")
	Python3   = debian("python3", "/usr/bin/python3", "python3-minimal") // also `make bench`'s plots
	Sh        = debian("sh", "/bin/sh", "dash")
	Systemd   = debian("systemd-analyze", "/usr/bin/systemd-analyze", "systemd") // the units' tests: systemd-analyze verify and security
	TC        = debian("tc", "/usr/sbin/tc", "iproute2")
	Tcpdump   = debian("tcpdump", "/usr/bin/tcpdump", "tcpdump")
	Unshare   = debian("unshare", "/usr/bin/unshare", "util-linux")
	Vtysh     = debian("vtysh", "/usr/bin/vtysh", "frr")
	WG        = debian("wg", "/usr/bin/wg", "wireguard-tools") // docs/links.md's quick start makes the keys with it, and the quick start test runs it
	Wrk       = debian("wrk", "/usr/bin/wrk", "wrk")
	Zebra     = debian("zebra", "/usr/lib/frr/zebra", "frr")
)

// crateRoot is where `make bench-deps` installs the crates (cargo install --root).
const crateRoot = "/usr/local"

var crates []Program

func crate(name, pkg string) Program {
	p := Program{name: name, path: filepath.Join(crateRoot, "bin", name), crate: pkg}
	crates = append(crates, p)
	return p
}

// Benchmarks' references that Debian does not package, from crates.io; only `make
// bench` needs them, and `make bench-deps` installs them (cargo builds each from
// source, which takes minutes).
var (
	Rathole = crate("rathole", "rathole")
	Bore    = crate("bore", "bore-cli")
)

// Crates returns the crates.io packages of the table, the list `make bench-deps`
// installs.
func Crates() []string {
	var out []string
	for _, p := range crates {
		out = append(out, p.crate)
	}
	return out
}

// Go is found on PATH: it is installed by hand, in the version go.mod names, because
// Debian's golang package is older.
var Go = Program{name: "go"}

var files = []File{
	{"/usr/include/bpf/bpf_helpers.h", "libbpf-dev", "bpf/include/refresh.sh copies libbpf's headers"},
	{"/usr/include/linux/bpf.h", "linux-libc-dev", "bpf/include/refresh.sh copies the kernel's uapi headers"},
	{"/usr/lib/nginx/modules/ngx_stream_module.so", "libnginx-mod-stream", "nginx as a TCP proxy in the HTTP comparison"},
	{"/usr/lib/python3/dist-packages/matplotlib/__init__.py", "python3-matplotlib", "bench/plot.py and bench/world_plot.py (make demo-global) draw the plots"},
	{"/usr/lib/python3/dist-packages/scapy/__init__.py", "python3-scapy", "the wire format test decodes its captures with scapy"},
}

// Built is a binary this repository builds (`make build`), at path.
func Built(path string) Program {
	return Program{name: filepath.Base(path), path: path, built: true}
}

// Name is the program's name, for messages.
func (p Program) Name() string { return p.name }

// Package is the Debian package that installs the program, "" when none does.
func (p Program) Package() string { return p.pkg }

// Path returns where the program is, or an error that says how to install it.
func (p Program) Path() (string, error) {
	switch {
	case p.path == "":
		path, err := exec.LookPath(p.name)
		if err != nil {
			return "", fmt.Errorf("%s is not on PATH: install Go, the version go.mod names", p.name)
		}
		return path, nil
	case p.built:
		if _, err := os.Stat(p.path); err != nil {
			return "", fmt.Errorf("%s is missing: run `make build` first", p.path)
		}
	case p.crate != "":
		if _, err := os.Stat(p.path); err != nil {
			return "", fmt.Errorf("%s is not installed (%s is missing): `make bench-deps` installs it (cargo install --root %s %s, from crates.io)", p.name, p.path, crateRoot, p.crate)
		}
	default:
		if _, err := os.Stat(p.path); err != nil {
			return "", fmt.Errorf("%s is not installed (%s is missing): `make deps` installs it (Debian package %s)", p.name, p.path, p.pkg)
		}
	}
	return p.path, nil
}

// Check returns an error naming what to install for each of progs that is missing.
func Check(progs ...Program) error {
	var errs []error
	for _, p := range progs {
		if _, err := p.Path(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Command is exec.Command for p. When p is missing, the command fails to start with
// the error of Path.
func Command(p Program, args ...string) *exec.Cmd {
	return CommandContext(context.Background(), p, args...)
}

// CommandContext is exec.CommandContext for p; see Command.
func CommandContext(ctx context.Context, p Program, args ...string) *exec.Cmd {
	path, err := p.Path()
	if err != nil {
		return unstartable(p, err)
	}
	return exec.CommandContext(ctx, path, args...)
}

// unstartable is a command whose Start, Run and Output return err.
func unstartable(p Program, err error) *exec.Cmd {
	return &exec.Cmd{Args: []string{p.name}, Err: err}
}

// InNetns runs p inside the network namespace ns with `ip netns exec`, which execs it:
// the process is p's own, not a child of ip.
func InNetns(ctx context.Context, ns string, p Program, args ...string) *exec.Cmd {
	path, err := p.Path()
	if err != nil {
		return unstartable(p, err)
	}
	return CommandContext(ctx, IP, append([]string{"netns", "exec", ns, path}, args...)...)
}

// Programs returns the table.
func Programs() []Program { return slices.Clone(programs) }

// Files returns the files installed from packages that are not programs the code runs.
func Files() []File { return slices.Clone(files) }

// Packages returns the Debian packages of the table, sorted, each once: what
// `make deps` installs.
func Packages() []string {
	var pkgs []string
	for _, p := range programs {
		pkgs = append(pkgs, p.pkg)
	}
	for _, f := range files {
		pkgs = append(pkgs, f.Package)
	}
	slices.Sort(pkgs)
	return slices.Compact(pkgs)
}
