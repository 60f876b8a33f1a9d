package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The node logs through log/slog's text handler: the bench reads what that handler
// writes, cut at any byte, and picks out the lines it waits on.
func TestNodeLogFollowsTheNodesLines(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	log.Info("XDP attached", "interface", "eth0", "mode", "native")
	log.Info(msgApplied, "revision", 41, "services", 10000, "prefix", "/manifold")
	log.Info(msgRunning, "node", "n001", "services", 10000, "config", "/tmp/a b.yaml")
	log.Info(msgChanged, "change", `service svc-0: backend 10.0.0.1 weight set (weight 1 → 2) "quoted"`, "revision", 57)
	log.Info(msgApplied, "revision", 57, "services", 10000)
	log.Error(msgNotApplied, "revision", 58, "err", "the kernel refused it")

	path := filepath.Join(t.TempDir(), "node.log")
	n := newNodeLog(path)
	data := buf.Bytes()
	// written in three pieces, the first two cut inside lines
	for _, piece := range [][]byte{data[:17], data[17 : len(data)/2], data[len(data)/2:]} {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(piece); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := n.poll(); err != nil {
			t.Fatal(err)
		}
	}

	if len(n.applied) != 2 || n.applied[0].revision != 41 || n.applied[0].services != 10000 || n.applied[1].revision != 57 {
		t.Errorf("applied: %+v, want revisions 41 (10000 services) and 57", n.applied)
	}
	if n.running == nil || n.running.services != 10000 {
		t.Errorf("running: %+v, want 10000 services", n.running)
	}
	if len(n.changed) != 1 || n.changed[0].revision != 57 {
		t.Errorf("changed: %+v, want revision 57", n.changed)
	}
	if n.failed == nil {
		t.Error("a revision not applied went unseen")
	}
	if at, ok := n.appliedAt(42); !ok || !at.Equal(n.applied[1].at) {
		t.Errorf("appliedAt(42) = %v, %v: want the time of revision 57", at, ok)
	}
	if _, ok := n.appliedAt(58); ok {
		t.Error("appliedAt(58): the node never applied it")
	}
	// the handler's clock is the node's: to the millisecond
	if d := time.Since(n.applied[0].at); d < 0 || d > time.Minute {
		t.Errorf("applied at %v, %v ago: the line's time was misread", n.applied[0].at, d)
	}
}

func TestParseLineRefusesOtherLines(t *testing.T) {
	for _, line := range []string{
		"",
		"panic: runtime error: index out of range",
		"goroutine 1 [running]:",
		`time=yesterday level=INFO msg="node running"`,
		`time=2026-11-27T15:41:48.746Z level=INFO msg="unterminated`,
		`time=2026-11-27T15:41:48.746Z level=INFO`,
	} {
		if l, ok := parseLine(line); ok {
			t.Errorf("parseLine(%q) = %+v, want refused", line, l)
		}
	}
}

func TestEtcdValues(t *testing.T) {
	// as etcd 3.4 writes them (Debian's etcd-server): put counted under its older name
	body := `# TYPE etcd_debugging_mvcc_events_total counter
etcd_debugging_mvcc_events_total 1200
# TYPE etcd_network_client_grpc_sent_bytes_total counter
etcd_network_client_grpc_sent_bytes_total 5e+06
# TYPE etcd_network_client_grpc_received_bytes_total counter
etcd_network_client_grpc_received_bytes_total 7000
# TYPE etcd_debugging_mvcc_put_total counter
etcd_debugging_mvcc_put_total 300
# TYPE etcd_debugging_mvcc_watch_stream_total gauge
etcd_debugging_mvcc_watch_stream_total 100
# TYPE etcd_debugging_mvcc_watcher_total gauge
etcd_debugging_mvcc_watcher_total 200
# TYPE etcd_debugging_mvcc_current_revision gauge
etcd_debugging_mvcc_current_revision 4711
# TYPE etcd_mvcc_db_total_size_in_use_in_bytes gauge
etcd_mvcc_db_total_size_in_use_in_bytes 16384
`
	v, err := etcdValues(body)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"events": 1200, "sent": 5e6, "received": 7000, "puts": 300, "streams": 100, "watchers": 200, "revision": 4711, "db": 16384}
	for k, w := range want {
		if v[k] != w {
			t.Errorf("%s = %v, want %v", k, v[k], w)
		}
	}
	// a metric gone (renamed by another etcd) is an error, not a load of zero
	if _, err := etcdValues("# TYPE etcd_debugging_mvcc_events_total counter\netcd_debugging_mvcc_events_total 1\n"); err == nil {
		t.Error("metrics missing: no error")
	}
}

func TestFdinfoMemlock(t *testing.T) {
	fdinfo := "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t2057\nmap_type:\t2\nkey_size:\t4\nvalue_size:\t4\nmax_entries:\t65536\nmap_flags:\t0x0\nmap_extra:\t0x0\nmemlock:\t524600\nmap_id:\t1014261\nfrozen:\t0\n"
	if got := fdinfoMemlock(fdinfo); got != 524600 {
		t.Errorf("memlock %d, want 524600", got)
	}
	if got := fdinfoMemlock("pos:\t0\n"); got != 0 {
		t.Errorf("no memlock line: %d, want 0", got)
	}
}

func TestLoadBetween(t *testing.T) {
	t0 := time.Now()
	a := etcdSample{at: t0, events: 100, sent: 1000, puts: 10, cpu: time.Second}
	a.revision, a.dbInUse = 1000, 1e6
	b := etcdSample{at: t0.Add(2 * time.Second), events: 300, sent: 5000, puts: 30, cpu: 2 * time.Second, streams: 100, watchers: 200,
		revision: 1200, dbInUse: 1.5e6}
	l := loadBetween(a, b)
	if l.events != 100 || l.sent != 2000 || l.puts != 10 || l.cpu != 0.5 || l.streams != 100 || l.revisions != 100 || l.dbGrowth != 250e3 {
		t.Errorf("load %+v: want 100 events/s, 2000 B/s, 10 puts/s, half a core, 100 streams, 100 revisions/s, 250 kB/s more", l)
	}
}

// memoryOf reads a real process's /proc: this test's own.
func TestMemoryOfThisProcess(t *testing.T) {
	m, err := memoryOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.rss == 0 || m.pss == 0 || m.pss > m.rss {
		t.Errorf("memory %+v: want a resident size, and a proportional share of it no larger", m)
	}
	if _, err := kBField("/proc/self/status", "NoSuchField"); err == nil {
		t.Error("a field /proc does not have: no error")
	}
}
