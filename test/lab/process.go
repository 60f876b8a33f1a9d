package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/manifoldlb/manifold/internal/hostprog"
)

// StopTimeout is how long Stop waits after SIGTERM before it sends SIGKILL.
const StopTimeout = 5 * time.Second

// Process is a command running inside a lab namespace under `ip netns exec` (which
// execs it: the pid is the command's own), with stdout and stderr in a log file.
type Process struct {
	Name    string // unique in the lab, names the log file
	Host    *Host
	LogPath string

	cmd     *exec.Cmd
	log     *os.File
	started time.Time     // just before the command was started
	done    chan struct{} // closed when the process has exited and been reaped

	mu      sync.Mutex
	waitErr error
}

// Start runs prog with args inside h's namespace. The lab stops it in Close if nobody
// did before.
func (l *Lab) Start(h *Host, name string, prog hostprog.Program, args ...string) (*Process, error) {
	logPath := filepath.Join(l.Dir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	argv := append([]string{prog.Name()}, args...)
	cmd := hostprog.InNetns(context.Background(), h.NS, prog, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// A process group of its own: Ctrl-C in a terminal reaches only the test or the
	// demo, which then stops its processes in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("%s: start %s in %s: %w", name, strings.Join(argv, " "), h.NS, err)
	}
	p := &Process{Name: name, Host: h, LogPath: logPath, cmd: cmd, log: logFile, started: started, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		logFile.Close()
		close(p.done)
	}()
	l.procs = append(l.procs, p)
	l.logf("%s: started in %s (pid %d): %s", name, h.NS, cmd.Process.Pid, strings.Join(argv, " "))
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Started is when the process was started: a benchmark times what it does from there.
func (p *Process) Started() time.Time { return p.started }

// Running reports whether the process has not exited yet.
func (p *Process) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// ExitErr is the result of the process once it has exited (nil for status 0).
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error {
	if !p.Running() {
		return fmt.Errorf("%s: not running (%v)", p.Name, p.ExitErr())
	}
	return p.cmd.Process.Signal(sig)
}

// Stop sends SIGTERM, waits up to StopTimeout, then sends SIGKILL. It returns an error
// when the process had to be killed or exited with a non-zero status. Stopping a
// process that has already exited returns how it exited.
func (p *Process) Stop() error {
	if !p.Running() {
		return p.exitErr("had exited")
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.exitErr("exited after SIGTERM")
	case <-time.After(StopTimeout):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s: still running %s after SIGTERM, killed", p.Name, StopTimeout)
}

// Wait waits up to timeout for the process to exit on its own.
func (p *Process) Wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.ExitErr()
	case <-time.After(timeout):
		return fmt.Errorf("%s: still running after %s", p.Name, timeout)
	}
}

func (p *Process) exitErr(what string) error {
	if err := p.ExitErr(); err != nil {
		return fmt.Errorf("%s: %s: %w", p.Name, what, err)
	}
	return nil
}

// WaitReady polls ready until it returns nil, for at most timeout; it gives up at once,
// with the end of the log, if the process exits.
func (p *Process) WaitReady(timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		running := p.Running()
		err := ready()
		if err == nil {
			return nil
		}
		if !running {
			return fmt.Errorf("%s exited (%v):\n%s", p.Name, p.ExitErr(), tail(p.Log(), 20))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %w", p.Name, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Log returns what the process has written so far.
func (p *Process) Log() string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	return string(b)
}

// LogTail is the last n lines of the process's log, for an error that says why.
func (p *Process) LogTail(n int) string { return tail(p.Log(), n) }

// WaitLog waits up to timeout for a line of the log for which match is true, and
// returns it. It gives up early if the process exits.
func (p *Process) WaitLog(timeout time.Duration, match func(line string) bool) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		// Read the state first: a line written just before the exit is still seen.
		running := p.Running()
		for line := range strings.Lines(p.Log()) {
			if match(line) {
				return strings.TrimSpace(line), nil
			}
		}
		if !running {
			return "", fmt.Errorf("%s exited (%v) without logging the line", p.Name, p.ExitErr())
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s did not log the line within %s", p.Name, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("… (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
