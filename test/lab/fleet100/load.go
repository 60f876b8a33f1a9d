package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	results "github.com/manifoldlb/manifold/bench"
	"github.com/manifoldlb/manifold/test/lab"
)

// etcdSample is what the etcd cluster had done by a moment, summed over its members:
// counters from each member's /metrics, and its CPU time from /proc.
type etcdSample struct {
	at time.Time
	// events sent to watchers (etcd_debugging_mvcc_events_total), bytes sent to and
	// received from clients (etcd_network_client_grpc_{sent,received}_bytes_total),
	// puts (etcd_mvcc_put_total, or etcd_debugging_mvcc_put_total in etcd 3.4)
	events, sent, received, puts float64
	// watch streams and watchers open (gauges: etcd_debugging_mvcc_watch_stream_total,
	// etcd_debugging_mvcc_watcher_total)
	streams, watchers float64
	// the store's revision (etcd_debugging_mvcc_current_revision) and the bytes its
	// database holds (etcd_mvcc_db_total_size_in_use_in_bytes): the history etcd keeps
	// until it is compacted. The same on every member: the largest is taken.
	revision, dbInUse float64
	cpu               time.Duration
}

// the counters sampled, with their older names (etcd 3.4, Debian's)
var etcdCounters = map[string][]string{
	"events":   {"etcd_debugging_mvcc_events_total"},
	"sent":     {"etcd_network_client_grpc_sent_bytes_total"},
	"received": {"etcd_network_client_grpc_received_bytes_total"},
	"puts":     {"etcd_mvcc_put_total", "etcd_debugging_mvcc_put_total"},
	"streams":  {"etcd_debugging_mvcc_watch_stream_total"},
	"watchers": {"etcd_debugging_mvcc_watcher_total"},
	"revision": {"etcd_debugging_mvcc_current_revision"},
	"db":       {"etcd_mvcc_db_total_size_in_use_in_bytes"},
}

// sampleEtcd reads every running member's metrics and CPU time.
func sampleEtcd(e *lab.Etcd) (etcdSample, error) {
	s := etcdSample{at: time.Now()}
	members := 0
	for _, m := range e.Members {
		if m.Proc == nil {
			continue
		}
		members++
		s.cpu += results.ProcessCPU(m.Proc.Pid())
		resp, err := lab.HTTPClient(m.Host.NS, 5*time.Second).Get(m.ClientURL() + "/metrics")
		if err != nil {
			return s, fmt.Errorf("etcd %s: /metrics: %w", m.Name, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return s, fmt.Errorf("etcd %s: /metrics: %w", m.Name, err)
		}
		v, err := etcdValues(string(body))
		if err != nil {
			return s, fmt.Errorf("etcd %s: %w", m.Name, err)
		}
		s.events += v["events"]
		s.sent += v["sent"]
		s.received += v["received"]
		s.puts += v["puts"]
		s.streams += v["streams"]
		s.watchers += v["watchers"]
		s.revision, s.dbInUse = max(s.revision, v["revision"]), max(s.dbInUse, v["db"])
	}
	// every member applies every put: the cluster's puts are one member's
	s.puts /= float64(max(1, members))
	return s, nil
}

// etcdValues picks the sampled metrics out of one member's /metrics, each summed over
// its series; a metric the member does not have is an error (a renamed metric would
// read as no load).
func etcdValues(body string) (map[string]float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("/metrics is not the Prometheus text format: %w", err)
	}
	out := map[string]float64{}
	for key, names := range etcdCounters {
		found := false
		for _, name := range names {
			if _, ok := families[name]; ok {
				out[key], found = lab.MetricSum(families, name), true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("/metrics has none of %v", names)
		}
	}
	return out, nil
}

// etcdLoad is what the cluster did between two samples, per second and per write.
type etcdLoad struct {
	seconds                      float64
	events, sent, received, puts float64 // per second
	cpu                          float64 // cores (CPU seconds per second)
	streams, watchers            float64 // open at the end
	revisions, dbGrowth          float64 // per second: the store's revisions, its database's bytes in use
}

func loadBetween(a, b etcdSample) etcdLoad {
	s := b.at.Sub(a.at).Seconds()
	return etcdLoad{
		seconds: s,
		events:  (b.events - a.events) / s, sent: (b.sent - a.sent) / s, received: (b.received - a.received) / s,
		puts: (b.puts - a.puts) / s, cpu: (b.cpu - a.cpu).Seconds() / s,
		streams: b.streams, watchers: b.watchers,
		revisions: (b.revision - a.revision) / s, dbGrowth: (b.dbInUse - a.dbInUse) / s,
	}
}

func (l etcdLoad) String() string {
	return fmt.Sprintf("%.0f watch events/s, %.0f kB/s sent, %.0f kB/s received, %.0f puts/s, %.0f revisions/s, database +%.0f MB/hour, CPU %.0f %% of a core (%d watch streams, %d watchers; over %.1f s)",
		l.events, l.sent/1e3, l.received/1e3, l.puts, l.revisions, l.dbGrowth*3600/1e6, 100*l.cpu, int(l.streams), int(l.watchers), l.seconds)
}

// memory is what one process holds: resident (RSS), its proportional share of pages
// shared with the other nodes (PSS: the binary's text is shared by every node), and
// the BPF maps it holds (the kernel's memory, outside both).
type memory struct {
	rss, pss, bpf uint64 // bytes
}

// memoryOf reads pid's memory from /proc: VmRSS from status, Pss from smaps_rollup,
// and the memlock of each BPF map among its open files (fdinfo).
func memoryOf(pid int) (memory, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	var m memory
	var err error
	if m.rss, err = kBField(dir+"/status", "VmRSS"); err != nil {
		return m, err
	}
	if m.pss, err = kBField(dir+"/smaps_rollup", "Pss"); err != nil {
		return m, err
	}
	fds, err := os.ReadDir(dir + "/fd")
	if err != nil {
		return m, err
	}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
		if err != nil || target != "anon_inode:bpf-map" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "fdinfo", fd.Name()))
		if err != nil {
			continue // closed since
		}
		m.bpf += fdinfoMemlock(string(b))
	}
	return m, nil
}

// fdinfoMemlock is the memlock: line of a BPF map's fdinfo, the bytes the map is
// charged for.
func fdinfoMemlock(fdinfo string) uint64 {
	for line := range strings.SplitSeq(fdinfo, "\n") {
		if v, ok := strings.CutPrefix(line, "memlock:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// kBField reads "Key:   N kB" from a /proc file, in bytes.
func kBField(path, key string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != key {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			break
		}
		n, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %s: %w", path, key, err)
		}
		return n * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no %s", path, key)
}

// memAvailable is the machine's MemAvailable (/proc/meminfo), in bytes.
func memAvailable() (uint64, error) { return kBField("/proc/meminfo", "MemAvailable") }
