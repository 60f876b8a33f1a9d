//go:build !unix

package config

import "io/fs"

// owner is empty where a file's owner is no uid and gid.
func owner(fs.FileInfo) string { return "" }
