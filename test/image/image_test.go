// Package image tests the container images: deploy/kubernetes' (the Dockerfile at the
// root of the tree) and the connector's (Dockerfile.connect), built with Debian's
// buildah, offline.
package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// The images build without pulling anything, each holds its static binary alone as
// its entrypoint, and that binary runs with no library beside it: the node's image
// (Dockerfile, make image) and the connector's (Dockerfile.connect, make connect-image).
func TestImage(t *testing.T) {
	testImage(t, "Dockerfile", "./cmd/manifold", "manifold", "validate", "--config", "internal/config/testdata/backend.yaml")
}

func TestConnectorImage(t *testing.T) {
	testImage(t, "Dockerfile.connect", "./cmd/manifold-connect", "manifold-connect", "version")
}

// testImage builds dockerfile's image as its make target does (the static binary of
// pkg as bin/NAME-static, then buildah bud) and runs the binary it holds with args.
func testImage(t *testing.T, dockerfile, pkg, name string, args ...string) {
	testenv.NeedRoot(t, "needs root (buildah's storage)")
	if err := hostprog.Check(hostprog.Buildah); err != nil {
		testenv.Missing(t, err)
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	run := func(prog hostprog.Program, env []string, args ...string) {
		t.Helper()
		cmd := hostprog.Command(prog, args...)
		cmd.Dir, cmd.Env = repo, append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", prog.Name(), strings.Join(args, " "), err, out)
		}
	}
	// as `make image` / `make connect-image` do
	run(hostprog.Go, []string{"CGO_ENABLED=0"}, "build", "-trimpath", "-o", "bin/"+name+"-static", pkg)
	// a store of the test's own, so that nothing of the machine's images is touched
	store := []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"), "--storage-driver", "vfs"}
	run(hostprog.Buildah, nil, append(store, "bud", "--isolation", "chroot", "--pull-never", "-f", dockerfile, "-t", name+":test", ".")...)
	img := filepath.Join(dir, "image")
	run(hostprog.Buildah, nil, append(store, "push", name+":test", "dir:"+img)...)

	var manifest struct {
		Config struct{ Digest string }
		Layers []struct{ Digest string }
	}
	readJSON(t, blob(img, "manifest.json"), &manifest)
	var config struct {
		Config struct{ Entrypoint []string }
	}
	readJSON(t, blob(img, manifest.Config.Digest), &config)
	if !slices.Equal(config.Config.Entrypoint, []string{"/" + name}) {
		t.Errorf("entrypoint %q, want [/%s]", config.Config.Entrypoint, name)
	}
	if len(manifest.Layers) != 1 {
		t.Fatalf("%d layers, want the binary's one", len(manifest.Layers))
	}
	bin := filepath.Join(dir, name)
	if files := unpack(t, blob(img, manifest.Layers[0].Digest), name, bin); !slices.Equal(files, []string{name}) {
		t.Errorf("the image holds %v, want the binary alone", files)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the image's binary is linked dynamically: FROM scratch has no loader for it")
		}
	}
	run(hostprog.Built(bin), nil, args...)
}

// blob is the path of a file of a `dir:` image: the manifest, or a blob by digest.
func blob(img, name string) string {
	return filepath.Join(img, strings.TrimPrefix(name, "sha256:"))
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// unpack lists the files of a layer (a tar, gzipped or not) and writes the one named
// want to bin.
func unpack(t *testing.T, layer, want, bin string) []string {
	t.Helper()
	f, err := os.Open(layer)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var in io.Reader = r
	if magic, _ := r.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		if in, err = gzip.NewReader(r); err != nil {
			t.Fatal(err)
		}
	}
	tr := tar.NewReader(in)
	var files []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(filepath.Clean("/"+h.Name), "/")
		files = append(files, name)
		if name == want {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(bin, data, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
}
