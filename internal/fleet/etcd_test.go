package fleet

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/manifoldlb/manifold/internal/config"
	"github.com/manifoldlb/manifold/internal/hostprog"
	"github.com/manifoldlb/manifold/internal/testenv"
)

// A real etcd on loopback, its members started and killed by the test: the fleet's
// behaviour is etcd's as much as this package's.

type member struct {
	name, dir    string
	client, peer string // URLs
	args         []string
	cmd          *exec.Cmd
	exited       chan struct{}
	out          *syncBuffer
}

type cluster struct {
	t       testing.TB
	members []*member
}

// startEtcd starts a cluster of n members and waits until it answers.
func startEtcd(t testing.TB, n int) *cluster {
	t.Helper()
	if _, err := hostprog.Etcd.Path(); err != nil {
		testenv.Missingf(t, "needs etcd: %v", err)
	}
	c := &cluster{t: t}
	var initial []string
	for i := range n {
		m := &member{name: fmt.Sprintf("m%d", i), dir: filepath.Join(t.TempDir(), "data"), out: &syncBuffer{}}
		m.client, m.peer = "http://"+freePort(t), "http://"+freePort(t)
		initial = append(initial, m.name+"="+m.peer)
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.args = []string{
			"--name", m.name, "--data-dir", m.dir,
			"--listen-client-urls", m.client, "--advertise-client-urls", m.client,
			"--listen-peer-urls", m.peer, "--initial-advertise-peer-urls", m.peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "fleet-test", "--logger", "zap", "--log-level", "warn",
		}
		c.start(m)
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			c.kill(m)
			if t.Failed() {
				t.Logf("etcd member %s:\n%s", m.name, m.out.String())
			}
		}
	})
	c.waitAnswers(c.endpoints())
	return c
}

func (c *cluster) start(m *member) {
	c.t.Helper()
	m.cmd = hostprog.Command(hostprog.Etcd, m.args...)
	m.cmd.Stdout, m.cmd.Stderr = m.out, m.out
	if err := m.cmd.Start(); err != nil {
		c.t.Fatalf("start etcd %s: %v", m.name, err)
	}
	m.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) {
		_ = cmd.Wait()
		close(exited)
	}(m.cmd, m.exited)
}

// kill stops a member at once, as a crash would, and waits until it is gone.
func (c *cluster) kill(m *member) {
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Kill()
	<-m.exited
	m.cmd = nil
}

// restart starts a killed member again on its data dir.
func (c *cluster) restart(m *member) {
	c.t.Helper()
	c.start(m)
	c.waitAnswers([]string{m.client})
}

// leader is the member that leads now.
func (c *cluster) leader(cli *clientv3.Client) *member {
	c.t.Helper()
	for _, m := range c.members {
		st, err := cli.Status(context.Background(), m.client)
		if err == nil && st.Leader == st.Header.MemberId {
			return m
		}
	}
	c.t.Fatal("no member leads")
	return nil
}

func (c *cluster) endpoints() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, m.client)
	}
	return out
}

// client is a client of every member, closed when the test ends.
func (c *cluster) client() *clientv3.Client {
	c.t.Helper()
	cli, err := Dial(config.Fleet{Endpoints: c.endpoints()})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// waitAnswers waits until a linearizable read through endpoints succeeds (a leader
// was elected).
func (c *cluster) waitAnswers(endpoints []string) {
	c.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 10 * time.Second, Logger: nopLogger()})
	if err != nil {
		c.t.Fatalf("etcd at %v: %v", endpoints, err)
	}
	defer cli.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := cli.Get(ctx, "ready")
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("etcd at %v does not answer: %v", endpoints, err)
		}
	}
}

// freePort is a loopback address whose port was free a moment ago.
func freePort(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
