// Package image tests the container image of deploy/kubernetes: the Dockerfile at the
// root of the tree, built with Debian's buildah, offline.
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

// The image builds without pulling anything, holds the static binary alone as its
// entrypoint, and that binary runs with no library beside it.
func TestImage(t *testing.T) {
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
	// as `make image` does
	run(hostprog.Go, []string{"CGO_ENABLED=0"}, "build", "-trimpath", "-o", "bin/manifold-static", "./cmd/manifold")
	// a store of the test's own, so that nothing of the machine's images is touched
	store := []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"), "--storage-driver", "vfs"}
	run(hostprog.Buildah, nil, append(store, "bud", "--isolation", "chroot", "--pull-never", "-t", "manifold:test", ".")...)
	img := filepath.Join(dir, "image")
	run(hostprog.Buildah, nil, append(store, "push", "manifold:test", "dir:"+img)...)

	var manifest struct {
		Config struct{ Digest string }
		Layers []struct{ Digest string }
	}
	readJSON(t, blob(img, "manifest.json"), &manifest)
	var config struct {
		Config struct{ Entrypoint []string }
	}
	readJSON(t, blob(img, manifest.Config.Digest), &config)
	if !slices.Equal(config.Config.Entrypoint, []string{"/manifold"}) {
		t.Errorf("entrypoint %q, want [/manifold]", config.Config.Entrypoint)
	}
	if len(manifest.Layers) != 1 {
		t.Fatalf("%d layers, want the binary's one", len(manifest.Layers))
	}
	bin := filepath.Join(dir, "manifold")
	if files := unpack(t, blob(img, manifest.Layers[0].Digest), bin); !slices.Equal(files, []string{"manifold"}) {
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
	run(hostprog.Built(bin), nil, "validate", "--config", "internal/config/testdata/backend-kubernetes.yaml")
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
// manifold to bin.
func unpack(t *testing.T, layer, bin string) []string {
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
		if name == "manifold" {
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
