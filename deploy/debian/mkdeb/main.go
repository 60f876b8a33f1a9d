// Command mkdeb builds manifold's Debian package (make deb) from a built binary: the
// binary, the systemd units of deploy/systemd, the example configs of deploy/examples,
// the shell completion the binary prints, and the documents Debian policy asks for,
// laid out as the package installs them and packed by dpkg-deb.
package main

import (
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

func main() {
	binary := flag.String("binary", "bin/manifold", "the manifold binary to package (built stripped)")
	connect := flag.String("connect-binary", "bin/manifold-connect", "the manifold-connect binary to package (built stripped)")
	version := flag.String("version", "", "the package version (a Debian version: 1.2.3, 0.0.0~git1a2b3c4)")
	out := flag.String("out", "bin", "the directory to write manifold_VERSION_amd64.deb into")
	root := flag.String("root", ".", "the repository's root (deploy/ is read from it)")
	flag.Parse()
	deb, err := build(*root, *binary, *connect, *version, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkdeb:", err)
		os.Exit(1)
	}
	fmt.Println(deb)
}

// maintainer is the package's Maintainer field.
const maintainer = "manifold developers <manifold@lists.manifoldlb.org>"

// build packages binary (cmd/manifold) and connect (cmd/manifold-connect, which
// manifold-connect.service runs).
func build(root, binary, connect, version, out string) (string, error) {
	if version == "" || strings.ContainsAny(version, " _/") || !strings.ContainsAny(version[:1], "0123456789") {
		return "", fmt.Errorf("--version %q: a Debian version starts with a digit and has no space, _ or /", version)
	}
	stage, err := os.MkdirTemp(out, ".deb-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(stage)
	// MkdirTemp makes it 0700: the package's root directory is the installed system's /.
	if err := os.Chmod(stage, 0o755); err != nil {
		return "", err
	}

	put := func(path string, data []byte, mode os.FileMode) error {
		full := filepath.Join(stage, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		return os.WriteFile(full, data, mode)
	}
	copyFile := func(from, to string, mode os.FileMode) error {
		data, err := os.ReadFile(from)
		if err != nil {
			return err
		}
		return put(to, data, mode)
	}

	if err := copyFile(binary, "usr/bin/manifold", 0o755); err != nil {
		return "", err
	}
	if err := copyFile(connect, "usr/bin/manifold-connect", 0o755); err != nil {
		return "", err
	}
	units, _ := filepath.Glob(filepath.Join(root, "deploy/systemd/*.service"))
	examples, _ := filepath.Glob(filepath.Join(root, "deploy/examples/*.yaml"))
	if len(units) == 0 || len(examples) == 0 {
		return "", errors.New("no units or examples under deploy/: is --root the repository's root?")
	}
	for _, u := range units {
		if err := copyFile(u, "lib/systemd/system/"+filepath.Base(u), 0o644); err != nil {
			return "", err
		}
	}
	for _, e := range examples {
		if err := copyFile(e, "usr/share/doc/manifold/examples/"+filepath.Base(e), 0o644); err != nil {
			return "", err
		}
	}
	for shell, path := range map[string]string{
		"bash": "usr/share/bash-completion/completions/manifold",
		"zsh":  "usr/share/zsh/vendor-completions/_manifold",
	} {
		script, err := hostprog.Command(hostprog.Built(binary), "completion", shell).Output()
		if err != nil {
			return "", fmt.Errorf("%s completion %s: %w", binary, shell, err)
		}
		if err := put(path, script, 0o644); err != nil {
			return "", err
		}
	}
	for bin, name := range map[string]string{binary: "manifold", connect: "manifold-connect"} {
		page, err := hostprog.Command(hostprog.Built(bin), "man").Output()
		if err != nil {
			return "", fmt.Errorf("%s man: %w", bin, err)
		}
		if page, err = gzipped(string(page)); err != nil {
			return "", err
		}
		if err := put("usr/share/man/man1/"+name+".1.gz", page, 0o644); err != nil {
			return "", err
		}
	}
	if err := put("usr/share/doc/manifold/copyright", []byte(copyright), 0o644); err != nil {
		return "", err
	}
	changelog, err := gzipped(fmt.Sprintf("manifold (%s) unstable; urgency=medium\n\n  * Built from the repository (make deb).\n\n -- %s  %s\n",
		version, maintainer, time.Now().UTC().Format(time.RFC1123Z)))
	if err != nil {
		return "", err
	}
	if err := put("usr/share/doc/manifold/changelog.gz", changelog, 0o644); err != nil {
		return "", err
	}

	size, err := installedKiB(stage)
	if err != nil {
		return "", err
	}
	control := fmt.Sprintf(`Package: manifold
Version: %s
Architecture: amd64
Maintainer: %s
Installed-Size: %d
Depends: libc6
Recommends: bird2 | frr
Section: net
Priority: optional
Homepage: https://github.com/manifoldlb/manifold
Description: active-active XDP load balancer with BGP, Maglev and DSR
 manifold gives a service one virtual IP that every node announces over BGP;
 the router spreads flows over the nodes with ECMP and each node sends each
 flow to a healthy backend chosen by Maglev consistent hashing, in XDP,
 encapsulated (IPIP, GUE) so that the backend answers the client directly.
 .
 This package has the manifold binary (node, backend agent, steering
 controller, tunnel connector, site-to-site link, operator CLI), the
 connector alone as manifold-connect, systemd
 units for each part, example configs and shell completion.
`, version, maintainer, size)
	if err := put("DEBIAN/control", []byte(control), 0o644); err != nil {
		return "", err
	}
	deb := filepath.Join(out, fmt.Sprintf("manifold_%s_amd64.deb", version))
	// --root-owner-group: every file root:root in the package without fakeroot.
	cmd := hostprog.Command(hostprog.DpkgDeb, "--root-owner-group", "-Zxz", "--build", stage, deb)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("dpkg-deb: %w\n%s", err, msg)
	}
	return deb, nil
}

// gzipped compresses as Debian policy wants documentation and manual pages compressed: gzip -9n, no
// name or time in the header, so the same input gives the same bytes.
func gzipped(s string) ([]byte, error) {
	var b bytes.Buffer
	z, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := z.Write([]byte(s)); err != nil {
		return nil, err
	}
	err = z.Close()
	return b.Bytes(), err
}

// installedKiB is the Installed-Size field: the files' sizes in KiB, rounded up.
func installedKiB(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		total += (info.Size() + 1023) / 1024
		return err
	})
	return total, err
}

const copyright = `Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: manifold
Source: https://github.com/manifoldlb/manifold

Files: *
Copyright: 2026 manifold developers
License: not-yet-chosen
 The project has not chosen the license of its Go code yet; the BPF programs
 below carry theirs.

Files: bpf/*
Copyright: 2026 manifold developers
License: GPL-2.0-only or BSD-2-Clause
 On Debian systems the full text of the GNU General Public License version 2
 can be found in /usr/share/common-licenses/GPL-2.
`
