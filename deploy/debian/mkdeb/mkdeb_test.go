package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

const repoRoot = "../../.."

// TestPackage builds the package from a fresh binary and checks it the way a Debian
// maintainer and an operator would: its control fields, its file list, lintian, and
// that every unit it installs passes systemd-analyze verify on the installed tree.
func TestPackage(t *testing.T) {
	for _, p := range []hostprog.Program{hostprog.DpkgDeb, hostprog.Lintian, hostprog.Systemd} {
		if _, err := p.Path(); err != nil {
			t.Skip(err)
		}
	}
	dir := t.TempDir()
	binary := builtBinary(t)
	deb, err := build(repoRoot, binary, builtConnector(t), "1.2.3~test", dir)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(deb) != "manifold_1.2.3~test_amd64.deb" {
		t.Errorf("package file %s", deb)
	}
	run := func(p hostprog.Program, args ...string) string {
		t.Helper()
		out, err := hostprog.Command(p, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", p.Name(), args, err, out)
		}
		return string(out)
	}

	t.Run("control", func(t *testing.T) {
		for field, want := range map[string]string{
			"Package": "manifold", "Version": "1.2.3~test", "Architecture": "amd64",
			"Section": "net", "Priority": "optional", "Depends": "libc6",
		} {
			if got := strings.TrimSpace(run(hostprog.DpkgDeb, "-f", deb, field)); got != want {
				t.Errorf("%s: %q, want %q", field, got, want)
			}
		}
		if !strings.Contains(run(hostprog.DpkgDeb, "-f", deb, "Description"), "XDP load balancer") {
			t.Error("no description")
		}
	})

	t.Run("contents", func(t *testing.T) {
		list := run(hostprog.DpkgDeb, "-c", deb)
		want := []string{
			"-rwxr-xr-x root/root .* ./usr/bin/manifold\n",
			"-rwxr-xr-x root/root .* ./usr/bin/manifold-connect\n",
			"-rw-r--r-- root/root .* ./usr/share/man/man1/manifold-connect.1.gz",
			"-rw-r--r-- root/root .* ./usr/share/bash-completion/completions/manifold",
			"-rw-r--r-- root/root .* ./usr/share/zsh/vendor-completions/_manifold",
			"-rw-r--r-- root/root .* ./usr/share/man/man1/manifold.1.gz",
			"-rw-r--r-- root/root .* ./usr/share/doc/manifold/copyright",
			"-rw-r--r-- root/root .* ./usr/share/doc/manifold/changelog.gz",
			"-rw-r--r-- root/root .* ./usr/share/doc/manifold/examples/node.yaml",
			"-rw-r--r-- root/root .* ./usr/share/doc/manifold/examples/backend.yaml",
			"-rw-r--r-- root/root .* ./usr/share/doc/manifold/examples/steer.yaml",
			"-rw-r--r-- root/root .* ./usr/share/doc/manifold/examples/connect.yaml",
			"-rw-r--r-- root/root .* ./usr/share/doc/manifold/examples/link.yaml",
			"drwxr-xr-x root/root .* ./\n",
		}
		for _, u := range units(t) {
			want = append(want, "-rw-r--r-- root/root .* ./lib/systemd/system/"+u)
		}
		for _, w := range want {
			if !regexp.MustCompile("(?m)^" + w).MatchString(list) {
				t.Errorf("package lacks %q:\n%s", w, list)
			}
		}
		if strings.Contains(list, "./etc/") {
			t.Errorf("the package ships files in /etc (the operator writes the configs):\n%s", list)
		}
	})

	t.Run("lintian", func(t *testing.T) {
		// lintian exits non-zero on errors; warnings are held to this list: this test's
		// binary is not built as PIE (make deb builds it so; doing it here would rebuild
		// every package without the cache). lintian also renders the manual page and
		// warns on its errors.
		out, _ := hostprog.Command(hostprog.Lintian, "--tag-display-limit", "0", deb).CombinedOutput()
		allowed := []string{"hardening-no-pie"}
		for _, line := range strings.Split(string(out), "\n") {
			m := regexp.MustCompile(`^([EWX]): manifold: ([a-z0-9-]+)`).FindStringSubmatch(line)
			if m == nil {
				continue
			}
			if m[1] != "W" || !slices.Contains(allowed, m[2]) {
				t.Errorf("lintian: %s", line)
			}
		}
	})

	t.Run("units", func(t *testing.T) {
		root := filepath.Join(dir, "root")
		run(hostprog.DpkgDeb, "-x", deb, root)
		// systemd-analyze verify --root checks each unit against the installed tree:
		// its ExecStart binary, ExecReload's kill, and the targets it orders against,
		// which the host's systemd provides.
		targets, _ := filepath.Glob("/lib/systemd/system/*.target")
		for _, f := range append(targets, "/bin/kill") {
			dst := filepath.Join(root, f)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			// copies: --root resolves an absolute symlink inside the root
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			mode := os.FileMode(0o644)
			if f == "/bin/kill" {
				mode = 0o755
			}
			if err := os.WriteFile(dst, data, mode); err != nil {
				t.Fatal(err)
			}
		}
		for _, u := range units(t) {
			out, err := hostprog.Command(hostprog.Systemd, "verify", "--root="+root, u).CombinedOutput()
			if err != nil || len(out) > 0 {
				t.Errorf("systemd-analyze verify %s: %v\n%s", u, err, out)
			}
		}
	})
}

var (
	buildOnce sync.Once
	binDir    string
	binErr    error
)

// built builds cmd/manifold and cmd/manifold-connect once for the tests of this
// package and returns the path of name's.
func built(t *testing.T, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "mkdeb-test-"); binErr != nil {
			return
		}
		for _, n := range []string{"manifold", "manifold-connect"} {
			args := []string{"build", "-ldflags", "-s -w", "-o", filepath.Join(binDir, n), "../../../cmd/" + n}
			if n == "manifold-connect" {
				// PIE, as make deb builds it: the few packages it links build again as
				// PIE in seconds, and non-PIE it would also lack RELRO (Go links it
				// itself), which lintian would flag
				args = slices.Insert(args, 1, "-buildmode=pie")
			}
			if out, err := hostprog.Command(hostprog.Go, args...).CombinedOutput(); err != nil {
				binErr = fmt.Errorf("go build: %v\n%s", err, out)
				return
			}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return filepath.Join(binDir, name)
}

func builtBinary(t *testing.T) string    { return built(t, "manifold") }
func builtConnector(t *testing.T) string { return built(t, "manifold-connect") }

// TestMain removes the binaries built made.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// units lists the units of deploy/systemd.
func units(t *testing.T) []string {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(repoRoot, "deploy/systemd/*.service"))
	if len(paths) == 0 {
		t.Fatal("no units in deploy/systemd")
	}
	var names []string
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	return names
}

// unitLines is a unit's lines, comments left out.
func unitLines(t *testing.T, name string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "deploy/systemd", name))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out
}

// unitKeys reads a unit's [Service] assignments (one value per key, the last wins).
func unitKeys(t *testing.T, name string) map[string]string {
	t.Helper()
	keys := map[string]string{}
	for _, line := range unitLines(t, name) {
		if k, v, ok := strings.Cut(line, "="); ok {
			keys[k] = v
		}
	}
	return keys
}

// TestUnitsHardening holds each unit to what its part needs and no more: the node and
// the backend agent get the BPF and network capabilities, the controller and the
// connector none; every unit runs its part on its own config file, restarts on
// failure and is sandboxed.
func TestUnitsHardening(t *testing.T) {
	caps := map[string]string{
		"manifold-node.service":    "CAP_BPF CAP_PERFMON CAP_SYS_ADMIN CAP_NET_ADMIN CAP_NET_BIND_SERVICE",
		"manifold-backend.service": "CAP_BPF CAP_PERFMON CAP_SYS_ADMIN CAP_NET_ADMIN",
		"manifold-steer.service":   "",
		"manifold-connect.service": "",
		"manifold-link.service":    "CAP_NET_ADMIN",
	}
	part := map[string]string{
		"manifold-node.service": "run", "manifold-backend.service": "backend", "manifold-steer.service": "steer",
		"manifold-connect.service": "connect", "manifold-link.service": "link",
	}
	for _, u := range units(t) {
		k := unitKeys(t, u)
		want, ok := caps[u]
		if !ok {
			t.Errorf("%s: a unit this test does not know: add what it may do", u)
			continue
		}
		if k["CapabilityBoundingSet"] != want || k["AmbientCapabilities"] != want {
			t.Errorf("%s: capabilities %q / %q, want %q", u, k["CapabilityBoundingSet"], k["AmbientCapabilities"], want)
		}
		conf := strings.TrimSuffix(strings.TrimPrefix(u, "manifold-"), ".service") + ".yaml"
		dir := "/etc/manifold/"
		if want == "" {
			// a part without privilege runs as a dynamic user, its config a credential
			dir = "%d/"
			if k["DynamicUser"] != "yes" {
				t.Errorf("%s: DynamicUser=%q, want yes: it needs no privilege", u, k["DynamicUser"])
			}
			if !slices.Contains(unitLines(t, u), "LoadCredential="+conf+":/etc/manifold/"+conf) {
				t.Errorf("%s: no LoadCredential=%s:/etc/manifold/%s", u, conf, conf)
			}
		}
		wantExec := "/usr/bin/manifold " + part[u] + " --config " + dir + conf
		if u == "manifold-connect.service" {
			// the connector's own binary (cmd/manifold-connect): the same part, alone
			wantExec = "/usr/bin/manifold-connect --config " + dir + conf
		}
		if k["ExecStart"] != wantExec {
			t.Errorf("%s: ExecStart=%s, want %s", u, k["ExecStart"], wantExec)
		}
		for key, val := range map[string]string{
			"Restart": "on-failure", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
			"UMask": "0077", "ProtectKernelModules": "yes", "ProtectKernelLogs": "yes", "ProtectClock": "yes",
			"SystemCallArchitectures": "native",
		} {
			if k[key] != val {
				t.Errorf("%s: %s=%q, want %q", u, key, k[key], val)
			}
		}
		if !strings.HasPrefix(k["SystemCallFilter"], "@system-service") && !slices.Contains(unitLines(t, u), "SystemCallFilter=@system-service") {
			t.Errorf("%s: no SystemCallFilter=@system-service", u)
		}
	}
	for _, u := range []string{"manifold-node.service", "manifold-backend.service"} {
		if k := unitKeys(t, u); k["SystemCallFilter"] != "@system-service bpf perf_event_open" {
			t.Errorf("%s: SystemCallFilter=%q, want @system-service and what BPF needs", u, k["SystemCallFilter"])
		}
	}
	for _, u := range []string{"manifold-node.service", "manifold-backend.service"} {
		if k := unitKeys(t, u); k["ExecReload"] != "/bin/kill -HUP $MAINPID" {
			t.Errorf("%s: ExecReload=%q: SIGHUP reloads its config", u, k["ExecReload"])
		}
	}
	if k := unitKeys(t, "manifold-node.service"); k["StateDirectory"] != "manifold" {
		t.Error("manifold-node.service: no state directory for the file store")
	}
}

// TestUnitsRunKnownCommands: each unit's ExecStart names a command the binary has, and
// the example config of each part passes manifold validate.
func TestUnitsRunKnownCommands(t *testing.T) {
	binary := builtBinary(t)
	for _, u := range units(t) {
		exec := strings.Fields(unitKeys(t, u)["ExecStart"])
		if exec[0] == "/usr/bin/manifold-connect" {
			// its one part: a missing file is its complaint, not its command line
			out, _ := hostprog.Command(hostprog.Built(builtConnector(t)), exec[1:]...).CombinedOutput()
			if !strings.Contains(string(out), "%d/connect.yaml: cannot read") {
				t.Errorf("%s: manifold-connect does not take its command line:\n%s", u, out)
			}
			continue
		}
		sub := exec[1]
		out, _ := hostprog.Command(hostprog.Built(binary), sub).CombinedOutput()
		if strings.Contains(string(out), "unknown command") {
			t.Errorf("%s runs `manifold %s`, which the binary does not have:\n%s", u, sub, out)
		}
	}
	examples, _ := filepath.Glob(filepath.Join(repoRoot, "deploy/examples/*.yaml"))
	for _, e := range examples {
		out, err := hostprog.Command(hostprog.Built(binary), "validate", "--config", e).CombinedOutput()
		// The examples name their certificates, keys and tokens in /etc/manifold (the
		// connector's beside it, or in the unit's credentials), which the repository
		// does not hold: that is the only complaint allowed.
		if err != nil && !onlyMissingFiles(string(out)) {
			t.Errorf("manifold validate %s: %v\n%s", e, err, out)
		}
	}
}

func onlyMissingFiles(out string) bool {
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.Contains(line, "cannot read /etc/manifold/") && !regexp.MustCompile(`(token_file|ca_file): cannot read \S*deploy/examples/`).MatchString(line) &&
			!regexp.MustCompile(`_file: /etc/manifold/\S+ does not exist$`).MatchString(line) {
			return false
		}
	}
	return true
}
