package sysctl

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func fakeRoot(t *testing.T, files map[string]string) {
	t.Helper()
	dir := t.TempDir() + "/"
	for name, v := range files {
		os.MkdirAll(filepath.Dir(dir+name), 0o755)
		if err := os.WriteFile(dir+name, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := Root
	Root = dir
	t.Cleanup(func() { Root = old })
}

func TestSetLogsOnceAndRestores(t *testing.T) {
	fakeRoot(t, map[string]string{"net/ipv4/conf/eth0/forwarding": "0", "net/ipv6/conf/eth0/forwarding": "1"})
	var logs bytes.Buffer
	c := New(slog.New(slog.NewTextHandler(&logs, nil)))
	for range 2 {
		if err := c.Set("net/ipv4/conf/eth0/forwarding", "1", "test"); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Set("net/ipv6/conf/eth0/forwarding", "1", "test"); err != nil {
		t.Fatal(err)
	}
	if got := Get("net/ipv4/conf/eth0/forwarding"); got != "1" {
		t.Fatalf("forwarding = %q after Set", got)
	}
	if n := strings.Count(logs.String(), "sysctl set"); n != 1 {
		t.Fatalf("%d change lines logged, want 1 (one real change):\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "name=net.ipv4.conf.eth0.forwarding") {
		t.Errorf("the log line does not name the setting: %s", logs.String())
	}
	c.Restore()
	if got := Get("net/ipv4/conf/eth0/forwarding"); got != "0" {
		t.Errorf("forwarding = %q after Restore, want the 0 found", got)
	}
	if got := Get("net/ipv6/conf/eth0/forwarding"); got != "1" {
		t.Errorf("an untouched setting changed on Restore: %q", got)
	}
}

func TestSetMissingSettingIsAClearError(t *testing.T) {
	fakeRoot(t, nil)
	c := New(slog.New(slog.DiscardHandler))
	err := c.Set("net/ipv4/conf/nosuch0/forwarding", "1", "test")
	if err == nil || !strings.Contains(err.Error(), "net.ipv4.conf.nosuch0.forwarding") {
		t.Fatalf("err = %v, want one naming the setting", err)
	}
}
