// Package testenv decides what a test does when the machine lacks something it needs —
// a program, a store, root: on a developer's machine it skips with the reason; under CI
// (CI=true, which .ci/run exports) it fails, because `make deps` installs everything
// the tests run and a CI machine that passes with tests not run hides a missing install
// step. Tests import it; nothing else does.
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// CI reports whether the tests run under CI.
func CI() bool { return os.Getenv("CI") == "true" }

// Missing ends t for want of what args say: skipped, or failed under CI.
func Missing(t testing.TB, args ...any) {
	t.Helper()
	if CI() {
		t.Fatal(append([]any{"CI=true and the machine lacks what this test needs:"}, args...)...)
	}
	t.Skip(args...)
}

// Missingf is Missing with a format.
func Missingf(t testing.TB, format string, args ...any) {
	t.Helper()
	Missing(t, fmt.Sprintf(format, args...))
}

// Need ends t as Missing does when err, the outcome of a check for what t needs
// (hostprog.Check, say), is not nil.
func Need(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		Missing(t, err)
	}
}

// NeedRoot ends t as Missing does unless the test runs as root (BPF, namespaces).
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "needs root: "+why)
	}
}
