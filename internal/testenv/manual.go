package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A ManualPage is a page of the manual as the docs' tests read it: its path from the
// repository's root and its lines.
type ManualPage struct {
	Name  string
	Lines []string
}

// Manual returns README.md and docs/*.md of the repository at root, in that order:
// the pages whose marked snippets and quick starts the tests run.
func Manual(t testing.TB, root string) []ManualPage {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []ManualPage
	for _, page := range append([]string{filepath.Join(root, "README.md")}, pages...) {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, page)
		out = append(out, ManualPage{Name: name, Lines: strings.Split(string(data), "\n")})
	}
	return out
}
