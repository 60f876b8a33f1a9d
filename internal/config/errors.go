package config

import (
	"fmt"
	"sort"
	"strings"
)

// Error is one problem in a config file. It prints as "FILE:LINE: field: message";
// the line is left out when unknown (0) and the field when the problem is not about
// one field (a YAML syntax error, an empty file).
type Error struct {
	File  string
	Line  int    // 1-based; 0 when unknown
	Field string // path of the field, e.g. services[0].backends[1].address
	Msg   string

	err error // underlying error, for errors.Is/As (only set for I/O errors)
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the underlying error, if any (e.g. fs.ErrNotExist from Load).
func (e *Error) Unwrap() error { return e.err }

// Errors is every problem found in a file, in line order. Load and Parse return an
// Errors (as error) when anything is wrong, never together with a config.
type Errors []*Error

// Error joins the errors with newlines.
func (e Errors) Error() string {
	s := make([]string, len(e))
	for i, err := range e {
		s[i] = err.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap returns the individual errors, for errors.Is and errors.As.
func (e Errors) Unwrap() []error {
	out := make([]error, len(e))
	for i, err := range e {
		out[i] = err
	}
	return out
}

// sorted returns the errors in line order (stable: errors on one line keep the order in
// which they were found), without exact duplicates, or nil when there are none.
func (e Errors) sorted() error {
	if len(e) == 0 {
		return nil
	}
	out := make(Errors, 0, len(e))
	type key struct {
		file, field, msg string
		line             int
	}
	seen := make(map[key]bool, len(e))
	for _, err := range e {
		k := key{err.File, err.Field, err.Msg, err.Line}
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, err)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return out
}
