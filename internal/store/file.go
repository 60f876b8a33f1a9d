package store

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// writeAtomic replaces the file at path with data so that a crash at any moment
// leaves either the old or the new contents, never a mix: write a temporary file in
// the same directory, fsync it, rename it over path, fsync the directory (which makes
// the rename itself durable). The file keeps its mode and owner (it may hold the API
// token). A symlink is followed: the file it points to is replaced, not the link.
func writeAtomic(path string, data []byte) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	info, err := os.Stat(real)
	if err != nil {
		return err
	}
	dir := filepath.Dir(real)
	// A fixed name: a temporary file left by a crash is overwritten by the next write
	// instead of piling up.
	tmp := filepath.Join(dir, "."+filepath.Base(real)+".manifold-tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
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
	return syncDir(dir)
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
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}
