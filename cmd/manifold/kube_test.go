package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// Bad invocations of kube-controller say what is wrong before touching any cluster.
func TestKubeControllerRefusesBadInvocations(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	missing := filepath.Join(t.TempDir(), "nope.kubeconfig")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "not in a cluster (give --kubeconfig FILE)"},
		{[]string{"--kubeconfig", missing}, "kubeconfig " + missing},
		{[]string{"--colour"}, "flag provided but not defined"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		err := kubeControllerCmd(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("kube-controller %v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}
