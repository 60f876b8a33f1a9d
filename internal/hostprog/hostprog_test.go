package hostprog

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/testenv"
)

// debianName is the syntax of a Debian package name (Debian Policy 5.6.1).
var debianName = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)

func TestTableIsWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range Programs() {
		if seen[p.name] {
			t.Errorf("%s: in the table twice", p.name)
		}
		seen[p.name] = true
		if !filepath.IsAbs(p.path) {
			t.Errorf("%s: path %q is not absolute", p.name, p.path)
		}
		if !debianName.MatchString(p.pkg) {
			t.Errorf("%s: %q is not a Debian package name", p.name, p.pkg)
		}
	}
	for _, f := range Files() {
		if !filepath.IsAbs(f.Path) || !debianName.MatchString(f.Package) || f.Use == "" {
			t.Errorf("file %+v: needs an absolute path, a Debian package name and a use", f)
		}
	}
}

// The table's package for each program and file is the one that installs it: what
// `make deps` installs is then what the code runs.
func TestPackagesInstallWhatTheTableSays(t *testing.T) {
	if _, err := Dpkg.Path(); err != nil {
		testenv.Missingf(t, "not a Debian machine: %v", err)
	}
	check := func(t *testing.T, path, pkg string) {
		if _, err := os.Stat(path); err != nil {
			testenv.Missingf(t, "%s is not installed yet (`make deps` installs %s)", path, pkg)
		}
		owners, err := dpkgOwners(path)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(owners, pkg) {
			t.Errorf("dpkg -S %s: installed by %v; the table says %s", path, owners, pkg)
		}
	}
	for _, p := range Programs() {
		t.Run(p.name, func(t *testing.T) { check(t, p.path, p.pkg) })
	}
	for _, f := range Files() {
		t.Run(f.Path, func(t *testing.T) { check(t, f.Path, f.Package) })
	}
}

// dpkgOwners returns the packages that `dpkg -S` says install path. Packages of
// Debian 12 still list many programs under /bin, /sbin and /lib, which the merged
// /usr reaches through symlinks, so the path without /usr is asked too.
func dpkgOwners(path string) ([]string, error) {
	out, err := Command(Dpkg, "-S", path).CombinedOutput()
	if err != nil && strings.HasPrefix(path, "/usr/") {
		out, err = Command(Dpkg, "-S", strings.TrimPrefix(path, "/usr")).CombinedOutput()
	}
	if err != nil {
		return nil, errors.New(strings.TrimSpace(string(out)))
	}
	// Lines are "pkg[:arch][, pkg…]: path"; dpkg-divert adds "diversion by …" lines.
	var owners []string
	for line := range strings.Lines(string(out)) {
		pkgs, _, ok := strings.Cut(line, ": ")
		if !ok || strings.HasPrefix(pkgs, "diversion by ") {
			continue
		}
		for pkg := range strings.SplitSeq(pkgs, ", ") {
			pkg, _, _ = strings.Cut(pkg, ":")
			owners = append(owners, pkg)
		}
	}
	return owners, nil
}

func TestMissingProgramSaysWhatToInstall(t *testing.T) {
	missing := Program{name: "nosuch", path: filepath.Join(t.TempDir(), "nosuch"), pkg: "nosuch-tools"}
	err := Command(missing, "-v").Run()
	if err == nil || !strings.Contains(err.Error(), "nosuch-tools") || !strings.Contains(err.Error(), "make deps") {
		t.Errorf("running a missing program: %v; want an error naming its package and `make deps`", err)
	}
	err = InNetns(t.Context(), "nowhere", missing).Run()
	if err == nil || !strings.Contains(err.Error(), "nosuch-tools") {
		t.Errorf("running a missing program in a namespace: %v; want an error naming its package", err)
	}
	built := Built(filepath.Join(t.TempDir(), "manifold"))
	if err := Command(built).Run(); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Errorf("running a binary not built yet: %v; want an error saying `make build`", err)
	}
}

// forbidden are the calls that start a program without the table.
var forbidden = map[string][]string{
	"os/exec": {"Command", "CommandContext", "LookPath"},
	"os":      {"StartProcess"},
	"syscall": {"Exec", "ForkExec", "StartProcess"},
}

// Every Go file of the module outside this package runs programs through the table,
// so a program added to the code without its package fails here.
func TestNoDirectExec(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	self, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	var files int
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == self || (path != root && strings.HasPrefix(d.Name(), ".")) || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		files++
		for _, call := range directExecs(t, path) {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s:%s: run programs through internal/hostprog (add the program to its table)", rel, call)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("walked %d Go files under %s: not the module", files, root)
	}
}

// directExecs returns "LINE: pkg.Func" for each forbidden call in the file.
func directExecs(t *testing.T, path string) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	local := map[string]string{} // the file's name of an import → its path
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if _, ok := forbidden[p]; !ok {
			continue
		}
		name := filepath.Base(p)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		local[name] = p
	}
	var calls []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		if p, ok := local[id.Name]; ok && slices.Contains(forbidden[p], sel.Sel.Name) {
			calls = append(calls, strconv.Itoa(fset.Position(sel.Pos()).Line)+": "+id.Name+"."+sel.Sel.Name)
		}
		return true
	})
	return calls
}
