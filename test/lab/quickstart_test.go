package lab

// The docs' quick starts, run as written. A quick start is the ```sh blocks marked
// `<!-- quickstart: NAME HOST -->` in README.md and docs/*.md, in the order of the
// page; each runs as a bash script (-euo pipefail) as root in the namespace of its
// host, with the addresses of deploy/examples. What a page cannot have run as written
// on a lab host is done here instead, and each page says so:
//   - installing the package: PATH holds manifold (the lab's build) and the examples
//     are where the package puts them, /usr/share/doc/manifold/examples;
//   - systemd: `systemctl enable --now UNIT` runs the unit's ExecStart (of
//     deploy/systemd) in the background, its LoadCredential= files copied to the
//     directory %d names, without systemd's sandbox, and `systemctl
//     restart etcd` runs Debian's etcd with /etc/default/etcd; nothing else of
//     systemctl is there;
//   - each host's /etc and /var/lib are its own (overlays, the test's directory above
//     them): what a script writes there stays in the lab;
//   - the router as a BGP peer (BIRD) and the web servers (nginx on port 80) are the
//     user's, and the test's; a Linux router's static route is a page's block;
//   - moving a file between hosts (scp in the docs) is a copy between their /etc.
// A block of the host `client` is the quick start's proof (a request through the VIP
// or the link): it is run again until it succeeds, for as long as a user would wait.

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifoldlb/manifold/internal/api/wire"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/kube/kubetest"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// quickStartMarker, on the line before a ```sh block, names the quick start and the
// host that block runs on.
var quickStartMarker = regexp.MustCompile(`^<!-- quickstart: ([a-z0-9-]+) ([a-z0-9]+) -->$`)

// quickStartBlock is one marked block.
type quickStartBlock struct {
	where  string // page:line of the marker
	host   string
	script string
}

// quickStartBlocks reads the marked blocks of README.md and docs/*.md, by quick start.
func quickStartBlocks(t *testing.T) map[string][]quickStartBlock {
	t.Helper()
	out := map[string][]quickStartBlock{}
	for _, page := range testenv.Manual(t, filepath.Join("..", "..")) {
		name, lines := page.Name, page.Lines
		for i, l := range lines {
			m := quickStartMarker.FindStringSubmatch(l)
			if m == nil {
				if strings.HasPrefix(l, "<!-- quickstart") {
					t.Errorf("%s:%d: %q: a marker is <!-- quickstart: NAME HOST -->", name, i+1, l)
				}
				continue
			}
			where := fmt.Sprintf("%s:%d", name, i+1)
			if i+1 >= len(lines) || lines[i+1] != "```sh" {
				t.Errorf("%s: the quickstart marker is not followed by a ```sh block", where)
				continue
			}
			end := i + 2
			for end < len(lines) && lines[end] != "```" {
				end++
			}
			if end == len(lines) {
				t.Errorf("%s: the sh block does not end", where)
				continue
			}
			out[m[1]] = append(out[m[1]], quickStartBlock{where, m[2], strings.Join(lines[i+2:end], "\n") + "\n"})
		}
	}
	return out
}

// systemctlStandIn is the `systemctl` of the quick starts' hosts: `enable --now` runs
// each unit's ExecStart in the background, its output in the host's directory.
const systemctlStandIn = `#!/bin/bash
set -eu
if [ "$#" -eq 2 ] && [ "$1 $2" = "restart etcd" ]; then
	# Debian's etcd.service: etcd with the variables of /etc/default/etcd. It is of
	# Type=notify, so systemctl returns once the member serves.
	set -a; . /etc/default/etcd; set +a
	etcd >>"$QS_HOST/etcd.log" 2>&1 </dev/null &
	for _ in $(seq 300); do
		grep -q "ready to serve client requests" "$QS_HOST/etcd.log" && exit 0
		kill -0 $! 2>/dev/null || break
		sleep 0.1
	done
	echo "systemctl: etcd did not start:" >&2; tail -5 "$QS_HOST/etcd.log" >&2; exit 1
fi
if [ "$#" -lt 3 ] || [ "$1 $2" != "enable --now" ]; then
	echo "systemctl (the quick start test's stand-in): only 'enable --now UNIT...' and 'restart etcd' run here, not: $*" >&2
	exit 1
fi
shift 2
for u in "$@"; do
	u=${u%.service}
	cmd=$(sed -n 's/^ExecStart=//p' "$QS_UNITS/$u.service")
	[ -n "$cmd" ] || { echo "systemctl: no unit $u" >&2; exit 1; }
	# the package's /usr/bin/manifold is the lab's build, on PATH; manifold-connect is
	# its connect command alone (the same code: cmd/manifold-connect's tests run that
	# binary itself)
	cmd=${cmd#/usr/bin/}
	cmd=${cmd/#manifold-connect /manifold connect }
	# LoadCredential=NAME:PATH copies PATH to NAME in the credentials directory, %d; a
	# missing file keeps the unit from starting, as under systemd
	creds="$QS_HOST/credentials/$u"
	mkdir -p "$creds"
	while IFS=: read -r name path; do
		cp "$path" "$creds/$name" || { echo "systemctl: $u: credential $name: $path cannot be read" >&2; exit 1; }
	done < <(sed -n 's/^LoadCredential=//p' "$QS_UNITS/$u.service")
	cmd=${cmd//%d/$creds}
	$cmd >>"$QS_HOST/$u.log" 2>&1 </dev/null &
done
`

// quickStartWrapper runs a block ($QS_SCRIPT) with the host's own /etc and /var/lib
// and the package's examples in place, in a mount namespace of its own (unshare).
const quickStartWrapper = `set -eu
for d in etc var/lib; do
	up=$QS_HOST/$(basename $d)
	mkdir -p "$up.up" "$up.work"
	mount -t overlay overlay -o "lowerdir=/$d,upperdir=$up.up,workdir=$up.work" /$d
done
mount -t overlay overlay -o "lowerdir=$QS_DOC:/usr/share/doc" /usr/share/doc
export PATH="$QS_BIN:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
cd "$QS_HOST"
exec bash -euo pipefail -c "$QS_SCRIPT"
`

// quickStart runs one quick start's blocks in a lab.
type quickStart struct {
	lab   *Lab
	dir   string
	bin   string // PATH: manifold, systemctl
	doc   string // holds manifold/examples: the package's /usr/share/doc/manifold
	hosts map[string]*Host
	// before runs before the first block of a host: the files it needs from another
	before map[string]func()
	env    []string // the user's environment besides PATH (KUBECONFIG)
}

func newQuickStart(t *testing.T, l *Lab) *quickStart {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	q := &quickStart{lab: l, dir: t.TempDir(), hosts: map[string]*Host{}, before: map[string]func(){}}
	q.bin = filepath.Join(q.dir, "bin")
	q.doc = filepath.Join(q.dir, "doc")
	examples := filepath.Join(q.doc, "manifold", "examples")
	for _, d := range []string{q.bin, examples} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(manifoldBin, filepath.Join(q.bin, "manifold")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(q.bin, "systemctl"), []byte(systemctlStandIn), 0o755); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "deploy", "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("deploy/examples: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(examples, filepath.Base(f)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for role := range q.hosts {
				logs, _ := filepath.Glob(filepath.Join(q.dir, role, "*.log"))
				for _, log := range logs {
					data, _ := os.ReadFile(log)
					t.Logf("%s, %s:\n%s", role, filepath.Base(log), tail(string(data), 40))
				}
			}
		}
		for role := range q.hosts {
			logs, _ := filepath.Glob(filepath.Join(q.dir, role, "*.log"))
			for _, log := range logs {
				if data, _ := os.ReadFile(log); strings.Contains(string(data), raceMarker) {
					t.Errorf("%s, %s: the race detector reported a data race", role, filepath.Base(log))
				}
			}
		}
	})
	return q
}

// hostDir is the directory of a host's /etc and /var/lib overlays and its daemons' logs.
func (q *quickStart) hostDir(role string) string { return filepath.Join(q.dir, role) }

// etc is where a host's /etc/manifold is, seen from outside the host.
func (q *quickStart) etc(role string) string {
	return filepath.Join(q.hostDir(role), "etc.up", "manifold")
}

// run runs a block on its host and returns its output.
func (q *quickStart) run(ctx context.Context, b quickStartBlock) (string, error) {
	h := q.hosts[b.host]
	if h == nil {
		return "", fmt.Errorf("%s: no host %q in this quick start's lab", b.where, b.host)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", err
	}
	bash, err := hostprog.Bash.Path()
	if err != nil {
		return "", err
	}
	cmd := hostprog.InNetns(ctx, h.NS, hostprog.Unshare, "--mount", "--propagation", "private", bash, "-c", quickStartWrapper)
	cmd.Env = append(os.Environ(),
		"QS_HOST="+q.hostDir(b.host), "QS_BIN="+q.bin, "QS_DOC="+q.doc,
		"QS_UNITS="+filepath.Join(root, "deploy", "systemd"), "QS_SCRIPT="+b.script)
	cmd.Env = append(cmd.Env, q.env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// runAll runs the blocks in order, a client's until it succeeds or within ends.
func (q *quickStart) runAll(t *testing.T, blocks []quickStartBlock, within time.Duration) {
	t.Helper()
	for _, b := range blocks {
		if fn := q.before[b.host]; fn != nil {
			fn()
			delete(q.before, b.host)
		}
		ctx, cancel := context.WithTimeout(context.Background(), within)
		var out string
		var err error
		if b.host == "client" {
			err = Eventually(within, 200*time.Millisecond, func() error {
				out, err = q.run(ctx, b)
				if err != nil {
					return fmt.Errorf("%w:\n%s", err, out)
				}
				return nil
			})
		} else {
			out, err = q.run(ctx, b)
		}
		cancel()
		if err != nil {
			t.Fatalf("%s, on %s:\n%s\nfailed: %v\n%s", b.where, b.host, b.script, err, out)
		}
		t.Logf("%s, on %s: ok\n%s", b.where, b.host, out)
	}
}

// copyFiles moves files of one host's /etc/manifold to another's, as scp would.
func (q *quickStart) copyFiles(t *testing.T, from, to string, names ...string) {
	t.Helper()
	if err := os.MkdirAll(q.etc(to), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(q.etc(from), n))
		if err != nil {
			t.Fatalf("copy %s from %s to %s: %v", n, from, to, err)
		}
		if err := os.WriteFile(filepath.Join(q.etc(to), n), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// The addresses of deploy/examples: the LB node (or edge) lb1 on
// 10.0.0.11/24 behind its router 10.0.0.1, the backend 10.0.1.1, and a client on
// the Internet.
var (
	exampleNode    = netip.MustParsePrefix("10.0.0.11/24")
	exampleRouter  = netip.MustParseAddr("10.0.0.1")
	exampleBackend = netip.MustParsePrefix("10.0.1.1/24")
	exampleClient  = netip.MustParsePrefix("203.0.113.2/24")
)

// quickStartLab builds the lab of a quick start: a client, and the given hosts.
func quickStartLab(t *testing.T, hosts ...HostSpec) *Lab {
	t.Helper()
	client := HostSpec{Role: "client", Kind: Client, Addr4: exampleClient, Gateway4: netip.MustParseAddr("203.0.113.1")}
	return newLabOf(t, append([]HostSpec{client}, hosts...)...)
}

// TestQuickStarts runs every quick start of the docs as written (the file's comment
// says what stands in for what a lab host lacks), each bounded in time.
func TestQuickStarts(t *testing.T) {
	requireManifold(t)
	testenv.Need(t, hostprog.Check(hostprog.Unshare, hostprog.Bash, hostprog.OpenSSL, hostprog.Curl, hostprog.IP, hostprog.Etcd, hostprog.Bird, hostprog.Nginx))
	blocks := quickStartBlocks(t)
	oneSite, fleetBlocks := blocks["one-site"], blocks["fleet"]
	const within = 30 * time.Second
	run := map[string]func(t *testing.T, blocks []quickStartBlock){
		// README.md: a node announcing the VIP of node.yaml to its router over BGP,
		// one backend of the three (the others' health checks fail).
		"one-site": func(t *testing.T, blocks []quickStartBlock) {
			startOneSite(t).runAll(t, blocks, within)
		},
		// docs/tunnels.md: an edge (edge.yaml), an origin that dials it (connect.yaml),
		// a static route to the VIP on the router.
		"tunnel": func(t *testing.T, blocks []quickStartBlock) {
			l := quickStartLab(t,
				HostSpec{Role: "edge", Kind: LBNode, Addr4: exampleNode, Gateway4: exampleRouter},
				HostSpec{Role: "origin", Kind: Backend})
			q := newQuickStart(t, l)
			q.hosts = map[string]*Host{"client": l.Host("client"), "edge": l.Host("edge"), "origin": l.Host("origin"), "router": l.Router}
			if _, err := l.StartNginx(l.Host("origin")); err != nil {
				t.Fatal(err)
			}
			// the docs: "copy edge-ca.crt and connect.token to the origin's /etc/manifold"
			q.before["origin"] = func() { q.copyFiles(t, "edge", "origin", "edge-ca.crt", "connect.token") }
			q.runAll(t, blocks, within)
		},
		// docs/fleet.md: one etcd member with TLS (in lb1's namespace, on 10.0.0.5),
		// lb1 of fleet-node.yaml seeded with node.yaml's services, as one-site.
		"fleet": func(t *testing.T, blocks []quickStartBlock) { runFleetQuickStart(t, blocks, oneSite, within) },
		// docs/steering.md, on the fleet of fleet.md's: the services given origins, a
		// controller; the node then serves the shares it decided for the node's site.
		"steering": func(t *testing.T, blocks []quickStartBlock) {
			q := runFleetQuickStart(t, fleetBlocks, oneSite, within)
			last := len(blocks) - 1 // manifold ctl steering, "a round later"
			q.runAll(t, blocks[:last], within)
			node := NewNodeAPI(q.hosts["lb"])
			err := Eventually(within, 200*time.Millisecond, func() error {
				var st wire.SteeringStatus
				if err := node.Get("/api/v1/steering", &st); err != nil {
					return err
				}
				for _, sv := range st.Services {
					if sv.Service == "web" && len(sv.Shares[st.Site]) > 0 {
						return nil
					}
				}
				return fmt.Errorf("no shares of web for site %q yet: %+v", st.Site, st)
			})
			if err != nil {
				t.Fatal(err)
			}
			q.runAll(t, blocks[last:], within)
		},
	}
	// docs/links.md: two gateways, dc1 and dc2, with the example's outer addresses
	// (added to their eth0, routed by the router), a host behind each.
	run["link"] = func(t *testing.T, blocks []quickStartBlock) {
		testenv.Need(t, hostprog.Check(hostprog.WG))
		l := newLabOf(t, HostSpec{Role: "dc1", Kind: Gateway}, HostSpec{Role: "dc2", Kind: Gateway})
		dc1, dc2 := l.Host("dc1"), l.Host("dc2")
		addr := netip.MustParseAddr
		hostA, err := l.AddSiteHost(dc1, "hosta", addr("10.1.0.1"), addr("10.1.0.2"), netip.Addr{}, netip.Addr{})
		if err != nil {
			t.Fatal(err)
		}
		hostB, err := l.AddSiteHost(dc2, "hostb", addr("10.2.0.1"), addr("10.2.0.2"), netip.Addr{}, netip.Addr{})
		if err != nil {
			t.Fatal(err)
		}
		for gw, outer := range map[*Host]string{dc1: "192.0.2.1", dc2: "192.0.2.2"} {
			if err := gw.Exec(hostprog.IP, "addr", "add", outer+"/32", "dev", HostLink); err != nil {
				t.Fatal(err)
			}
			if err := l.Router.Exec(hostprog.IP, "route", "add", outer+"/32", "via", gw.Addr4.String()); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := l.StartNginx(hostB); err != nil {
			t.Fatal(err)
		}
		q := newQuickStart(t, l)
		q.hosts = map[string]*Host{"dc1": dc1, "dc2": dc2, "client": hostA}
		// the docs: "copy dc1.pub to dc2's /etc/manifold/ and dc2.pub to dc1's", once
		// both have made their keys: before the first block of a host that ran one
		ran := map[string]bool{}
		for i, b := range blocks {
			if ran[b.host] {
				q.runAll(t, blocks[:i], within)
				q.copyFiles(t, "dc1", "dc2", "dc1.pub")
				q.copyFiles(t, "dc2", "dc1", "dc2.pub")
				q.runAll(t, blocks[i:], within)
				return
			}
			ran[b.host] = true
		}
		t.Fatal("the link quick start runs no second block on a gateway")
	}
	// docs/kubernetes.md: the real API server on the host kube, kubectl there with the
	// admin's kubeconfig in a clone's deploy/kubernetes; the Node lb1 registered and
	// the controller run as its Deployment would (no kubelet in the lab).
	run["kubernetes"] = func(t *testing.T, blocks []quickStartBlock) {
		bin, missing := kubetest.Binary("../..")
		if missing != "" {
			testenv.Missing(t, missing)
		}
		testenv.Need(t, hostprog.Check(hostprog.Kubectl))
		l := newLabOf(t, HostSpec{Role: "kube", Kind: Client})
		cp := l.Host("kube")
		c, err := l.StartKube(bin, "../../deploy/kubernetes", cp)
		if err != nil {
			t.Fatal(err)
		}
		failed := true
		t.Cleanup(func() { c.Stop(failed) })
		c.Node(t, "lb1", exampleNode.Addr().String(), true, nil)
		kubeconfig, err := c.KubeconfigAs("controller", kubetest.ControllerUser)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Start(cp, "kube-controller", hostprog.Built(manifoldBin), "kube-controller", "--kubeconfig", kubeconfig); err != nil {
			t.Fatal(err)
		}
		q := newQuickStart(t, l)
		q.hosts = map[string]*Host{"admin": cp}
		q.env = []string{"KUBECONFIG=" + c.Kubeconfig()}
		// a clone of the repository, as far as the page uses one
		if err := os.CopyFS(filepath.Join(q.hostDir("admin"), "deploy", "kubernetes"), os.DirFS("../../deploy/kubernetes")); err != nil {
			t.Fatal(err)
		}
		last := len(blocks) - 1 // kubectl get svc web, "within a second"
		q.runAll(t, blocks[:last], within)
		err = Eventually(within, 100*time.Millisecond, func() error {
			svc, err := c.CS.CoreV1().Services("default").Get(context.Background(), "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, in := range svc.Status.LoadBalancer.Ingress {
				if in.IP == "198.51.100.16" {
					return nil
				}
			}
			return fmt.Errorf("service web: status %+v, want the pool's first address 198.51.100.16", svc.Status.LoadBalancer)
		})
		if err != nil {
			t.Fatal(err)
		}
		q.runAll(t, blocks[last:], within)
		failed = t.Failed()
	}
	for name, blocks := range blocks {
		if run[name] == nil {
			t.Errorf("%s: quick start %q has no lab in TestQuickStarts: give it one", blocks[0].where, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(run)) {
		fn := run[name]
		t.Run(name, func(t *testing.T) {
			if len(blocks[name]) == 0 {
				t.Fatalf("no block of the quick start %q in README.md or docs/*.md", name)
			}
			fn(t, blocks[name])
		})
	}
}

// startOneSite builds the lab of the README's one-site quick start: lb1 and the
// backend be1 (a web server on port 80) at the examples' addresses, the router a BGP
// peer of lb1 as node.yaml's bgp section says.
func startOneSite(t *testing.T) *quickStart {
	t.Helper()
	l := quickStartLab(t,
		HostSpec{Role: "lb1", Kind: LBNode, Addr4: exampleNode, Gateway4: exampleRouter},
		HostSpec{Role: "be1", Kind: Backend, Addr4: exampleBackend, Gateway4: netip.MustParseAddr("10.0.1.254")})
	q := newQuickStart(t, l)
	q.hosts = map[string]*Host{"client": l.Host("client"), "lb": l.Host("lb1"), "backend": l.Host("be1")}
	if _, err := l.StartNginx(l.Host("be1")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.StartBird([]RouterPeer{{Name: "lb1", Address: exampleNode.Addr(), ASN: 65001}}, RouterOptions{}); err != nil {
		t.Fatal(err)
	}
	return q
}

// runFleetQuickStart runs docs/fleet.md's quick start on the one-site lab: one etcd
// member with TLS (in lb1's namespace, on 10.0.0.5), lb1 of fleet-node.yaml seeded with
// node.yaml's services, the one-site quick start's backend.
func runFleetQuickStart(t *testing.T, blocks, oneSite []quickStartBlock, within time.Duration) *quickStart {
	t.Helper()
	q := startOneSite(t)
	lb1 := q.hosts["lb"]
	q.hosts["etcd"] = lb1
	if err := lb1.Exec(hostprog.IP, "addr", "add", "10.0.0.5/24", "dev", HostLink); err != nil {
		t.Fatal(err)
	}
	// the one-site quick start's backend, as the page says
	for _, b := range oneSite {
		if b.host == "backend" {
			q.runAll(t, []quickStartBlock{b}, within)
		}
	}
	q.before["lb"] = func() { q.copyFiles(t, "etcd", "lb", "etcd-ca.crt", "etcd-client.crt", "etcd-client.key") }
	q.runAll(t, blocks, within)
	return q
}
