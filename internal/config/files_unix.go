//go:build unix

package config

import (
	"fmt"
	"io/fs"
	"syscall"
)

// owner is ", owner uid U gid G" of a file, for a message on why it cannot be read.
func owner(info fs.FileInfo) string {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf(", owner uid %d gid %d", st.Uid, st.Gid)
	}
	return ""
}
