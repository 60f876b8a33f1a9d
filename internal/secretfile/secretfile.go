// Package secretfile reads the files that hold secrets — API and tunnel tokens, the
// etcd password, private keys — bounded in size, and says when one can be read by
// users other than its owner: a token file left at 0644 hands the node's API to every
// local account.
package secretfile

import (
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"runtime"
)

// MaxSize bounds a secret file: the largest of them (a tokens file of many connectors,
// a certificate chain) is a few KiB.
const MaxSize = 1 << 20

// Read returns the file's contents, and logs a warning naming it when its permissions
// let its group or others read it (not on Windows, whose ACLs mode bits do not show).
func Read(path string, log *slog.Logger) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if w := Exposed(info); w != "" && log != nil {
		log.Warn("secret file is readable by others: chmod 600 it", "file", path, "mode", w)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%s: larger than %d bytes, not a secret file", path, MaxSize)
	}
	return data, nil
}

// Exposed returns the file's mode when its group or others may read or write it, ""
// when only its owner may (or on Windows).
func Exposed(info fs.FileInfo) string {
	if runtime.GOOS == "windows" || info.Mode().Perm()&0o066 == 0 {
		return ""
	}
	return info.Mode().Perm().String()
}
