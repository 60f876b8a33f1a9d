package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// maxLinks bounds the symlinks followed to the config file, as the kernel's
// MAXSYMLINKS (40) bounds a path lookup.
const maxLinks = 40

// notDurable is an error after the rename: the file holds the new contents, but a step
// that makes the rename survive a power cut failed. The write is done; the caller
// reports it as made, with a warning.
type notDurable struct{ err error }

func (e *notDurable) Error() string {
	return fmt.Sprintf("the config file was written but may not survive a power cut: %v", e.err)
}

func (e *notDurable) Unwrap() error { return e.err }

// fsyncDir makes a rename in dir durable. A variable so that a test can make it fail
// (tmpfs never does).
var fsyncDir = func(d *os.File) error { return d.Sync() }

// writeAtomic replaces the file at path with data so that a crash at any moment
// leaves either the old or the new contents, never a mix: write a new temporary file
// in the same directory, fsync it, rename it over the file, fsync the directory (which
// makes the rename itself durable). The file keeps its mode and owner (it may hold the
// API token). A symlink to the file is followed, and the file it points to replaced,
// only when it is trusted (see resolveLink); the link itself stays a link.
//
// Nothing is opened for writing by a name someone else may have planted: the
// temporary file is created new (O_EXCL, so a symlink or file at its name is never
// followed or reused) under a random name, and the rename replaces the directory
// entry, never following a link there. An error after the rename is a *notDurable: the
// file changed.
func writeAtomic(path string, data []byte) error {
	real, err := resolveLink(path)
	if err != nil {
		return err
	}
	info, err := os.Lstat(real)
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", real)
	}
	dir := filepath.Dir(real)
	f, err := os.CreateTemp(dir, "."+filepath.Base(real)+".manifold-tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = writeSync(f, data, info)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, real)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if err := syncDir(dir); err != nil {
		return &notDurable{err}
	}
	return nil
}

// resolveLink follows path while it is a symlink and returns the file it names. The
// node runs as root, so a link that someone else could have planted is refused rather
// than followed, as the kernel's fs.protected_symlinks does in sticky directories: a
// link is followed only when it belongs to this process's user or to the owner of the
// directory it is in (who could have replaced the file anyway). Directories on the way
// are resolved as the kernel resolves them.
func resolveLink(path string) (string, error) {
	for range maxLinks {
		dir, err := filepath.EvalSymlinks(filepath.Dir(path))
		if err != nil {
			return "", err
		}
		path = filepath.Join(dir, filepath.Base(path))
		fi, err := os.Lstat(path)
		if err != nil {
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			return path, nil
		}
		if err := trustedLink(path, fi, dir); err != nil {
			return "", err
		}
		to, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(to) {
			to = filepath.Join(dir, to)
		}
		path = to
	}
	return "", fmt.Errorf("%s: %w", path, syscall.ELOOP)
}

func trustedLink(link string, fi os.FileInfo, dir string) error {
	lst, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if int(lst.Uid) == os.Geteuid() {
		return nil
	}
	di, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if dst, ok := di.Sys().(*syscall.Stat_t); ok && dst.Uid == lst.Uid {
		return nil
	}
	return fmt.Errorf("%s is a symlink owned by uid %d, neither this process's user nor the owner of %s: not followed to write the config (replace it with the file or a link of your own)",
		link, lst.Uid, dir)
}

func writeSync(f *os.File, data []byte, like os.FileInfo) error {
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Chmod(like.Mode().Perm()); err != nil {
		return err
	}
	if st, ok := like.Sys().(*syscall.Stat_t); ok {
		// only root may give a file away; anyone else writes files it owns already
		if err := f.Chown(int(st.Uid), int(st.Gid)); err != nil && os.Geteuid() == 0 {
			return err
		}
	}
	return f.Sync()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := fsyncDir(d); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// isNotDurable tells whether err came after the file was renamed into place.
func isNotDurable(err error) bool {
	var nd *notDurable
	return errors.As(err, &nd)
}

// sameOnDisk tells whether the file at path holds exactly data, reading it a block at
// a time: a write among 100 000 services checks a file of about 20 MB twice, and a copy of
// it each time is garbage the size of the file (issue 26).
func sameOnDisk(path string, data []byte) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := io.ReadFull(f, buf)
		if n > len(data) || !bytes.Equal(buf[:n], data[:n]) {
			return false, nil
		}
		data = data[n:]
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			return len(data) == 0, nil
		case err != nil:
			return false, err
		}
	}
}
