// Package arch holds docs/ARCHITECTURE.md to the code: the table "Who may import whom"
// must list every package of the project with exactly the imports of our own packages
// that its (non-test) files make.
package arch

import (
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/manifoldlb/manifold/"

var root = filepath.Join("..", "..")

// documented reads the table between <!-- imports --> and <!-- end -->.
func documented(t *testing.T) map[string][]string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- imports -->")
	table, _, ok2 := strings.Cut(rest, "<!-- end -->")
	if !ok || !ok2 {
		t.Fatal("docs/ARCHITECTURE.md has no <!-- imports --> … <!-- end --> table")
	}
	code := regexp.MustCompile("`([^`]+)`")
	out := map[string][]string{}
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 4 || !strings.Contains(cells[1], "`") {
			continue
		}
		pkg := code.FindStringSubmatch(cells[1])[1]
		if _, dup := out[pkg]; dup {
			t.Errorf("the table lists %s twice", pkg)
		}
		out[pkg] = []string{}
		for _, m := range code.FindAllStringSubmatch(cells[2], -1) {
			out[pkg] = append(out[pkg], m[1])
		}
		slices.Sort(out[pkg])
	}
	if len(out) == 0 {
		t.Fatal("no rows read from the table")
	}
	return out
}

// actual reads the imports of our own packages from the source files of every package
// directory; test files count only when withTests.
func actual(t *testing.T, dir string, withTests bool) []string {
	t.Helper()
	set := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, f := range files {
		if !withTests && strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			if p := strings.Trim(imp.Path.Value, `"`); strings.HasPrefix(p, module) {
				set[strings.TrimPrefix(p, module)] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// packages lists the project's package directories (those with a non-test Go file),
// relative to the root.
func packages(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			if !slices.Contains(out, rel) {
				out = append(out, rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func isLab(pkg string) bool { return pkg == "test/lab" || strings.HasPrefix(pkg, "test/lab/") }

func TestImportsAreTheDocumentedOnes(t *testing.T) {
	doc := documented(t)
	seen := map[string]bool{}
	for _, pkg := range packages(t) {
		if isLab(pkg) {
			continue
		}
		seen[pkg] = true
		want, ok := doc[pkg]
		if !ok {
			t.Errorf("%s is not in docs/ARCHITECTURE.md's import table: add it, with what it is", pkg)
			continue
		}
		if got := actual(t, filepath.Join(root, pkg), false); !slices.Equal(got, want) {
			t.Errorf("%s imports %v; docs/ARCHITECTURE.md says it may import %v", pkg, got, want)
		}
	}
	for pkg := range doc {
		if !seen[pkg] {
			t.Errorf("docs/ARCHITECTURE.md lists %s, which is not a package of the tree", pkg)
		}
	}
}

// The lab talks to daemons as an operator does: through the binary and the API.
func TestLabDoesNotImportTheDaemon(t *testing.T) {
	labs := 0
	for _, pkg := range packages(t) {
		if !isLab(pkg) {
			continue
		}
		labs++
		if slices.Contains(actual(t, filepath.Join(root, pkg), true), "internal/node") {
			t.Errorf("%s imports internal/node; decode the API's types (internal/api) instead", pkg)
		}
	}
	if labs == 0 {
		t.Fatal("no lab package found: the walk is broken")
	}
}
