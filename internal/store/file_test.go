package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// failDirSync makes the directory fsync after the rename fail for the rest of the test.
func failDirSync(t *testing.T) {
	t.Helper()
	was := fsyncDir
	fsyncDir = func(*os.File) error { return errors.New("input/output error (injected)") }
	t.Cleanup(func() { fsyncDir = was })
}

// A write whose directory fsync fails after the rename has changed the file: it is
// reported as made, with a warning, and the store follows the file, so the next write
// is not refused as if the operator had edited the file.
func TestFailureAfterTheRenameIsACommitWithAWarning(t *testing.T) {
	src, _, logs := newSource(t)
	failDirSync(t)
	drain := func(be string) error {
		return src.Change(context.Background(), func(st *Store) (*Change, error) { return st.Drain("web", be) })
	}
	err := drain("10.0.1.2")
	var made *Committed
	if !errors.As(err, &made) || !strings.Contains(made.Warning, "injected") {
		t.Fatalf("err = %v, want a *Committed carrying the fsync error", err)
	}
	if !strings.Contains(read(t, src.Store()), "weight: 0") || weight(t, src.Store().Config(), "web", "10.0.1.2") != 0 {
		t.Fatalf("the file or the store does not hold the change:\n%s", read(t, src.Store()))
	}
	if !src.Store().InSync() {
		t.Error("the store does not follow the file it wrote")
	}
	if !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("the warning is not logged: %s", logs.String())
	}
	if err := drain("10.0.1.1"); !errors.As(err, &made) {
		t.Fatalf("the next write: %v, want it made (with the same warning)", err)
	}
	if weight(t, src.Store().Config(), "web", "10.0.1.1") != 0 {
		t.Error("the next write did not take effect")
	}
}

// A kernel refusal after a commit puts the file back even when the directory fsync of
// the restore fails: the state follows the file, and the refusal is what is reported.
func TestRevertWithAFailedDirSyncRestores(t *testing.T) {
	src, sk, _ := newSource(t)
	before := read(t, src.Store())
	failDirSync(t)
	sk.refuse = errors.New("map full")
	err := src.Change(context.Background(), func(st *Store) (*Change, error) { return st.Drain("web", "10.0.1.2") })
	var se *Error
	if !errors.As(err, &se) || se.Kind != Failed {
		t.Fatalf("err = %v, want the kernel's refusal", err)
	}
	if read(t, src.Store()) != before || !src.Store().InSync() {
		t.Error("the file or the store kept the refused change")
	}
}

// A symlink planted where the old code put its temporary file (a fixed name) is neither
// followed nor renamed over the config: the file it points to keeps its contents, and
// the config file stays a regular file.
func TestPlantedTempSymlinkIsNotFollowed(t *testing.T) {
	s := open(t, "node.yaml")
	dir := filepath.Dir(s.Path())
	victim := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(victim, []byte("root:x:0:0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, ".node.yaml.manifold-tmp")); err != nil {
		t.Fatal(err)
	}
	ch, err := s.Drain("web", "10.0.1.2")
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, ch)
	if b, _ := os.ReadFile(victim); string(b) != "root:x:0:0\n" {
		t.Errorf("the planted link was followed: its target now holds\n%s", b)
	}
	if fi, err := os.Lstat(s.Path()); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the config file is no longer a regular file: %v %v", fi.Mode(), err)
	}
}

// As root, a config path that is a symlink someone else owns (in a directory they do
// not own) is not followed to write: the file it points to is untouched. A link of
// root's own (TestWriteKeepsModeAndLink) still is.
func TestForeignSymlinkAsConfigIsNotFollowed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the link is given to another user")
	}
	s := open(t, "node.yaml")
	target := s.Path()
	before := read(t, s)
	link := filepath.Join(filepath.Dir(target), "current.yaml")
	if err := os.Symlink(filepath.Base(target), link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	s, err := Open(link)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := s.Drain("web", "10.0.1.2")
	if err != nil {
		t.Fatal(err)
	}
	err = s.Commit(ch)
	if err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Fatalf("err = %v, want the foreign link refused", err)
	}
	if b, _ := os.ReadFile(target); string(b) != before {
		t.Error("the write went through the foreign link")
	}
	if s.Config() == ch.Config {
		t.Error("the store took a change it did not write")
	}
}
