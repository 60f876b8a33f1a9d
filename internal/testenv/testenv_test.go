package testenv

import (
	"os"
	"strings"
	"testing"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// The helper's verdict is read from a child test process, which is where a skip or a
// failure shows: once with CI=true, once without.
func TestMissingFailsUnderCI(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "1" {
		Missing(t, "the widget program")
		return
	}
	for _, c := range []struct {
		ci       string
		fails    bool
		contains string
	}{{"true", true, "--- FAIL"}, {"", false, "--- SKIP"}} {
		cmd := hostprog.Command(hostprog.Built(os.Args[0]), "-test.run=^TestMissingFailsUnderCI$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTENV_CHILD=1", "CI="+c.ci)
		out, err := cmd.CombinedOutput()
		if (err != nil) != c.fails || !strings.Contains(string(out), c.contains) || !strings.Contains(string(out), "the widget program") {
			t.Errorf("CI=%q: err %v, output:\n%s\nwant %s with the reason", c.ci, err, out, c.contains)
		}
	}
}
