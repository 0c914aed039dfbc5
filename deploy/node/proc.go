package node

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// startDetached starts a long-running process of the node in its own session (it outlives
// node-up), logging to <Root>/logs/<name>.log, its pid in <Run>/pids/<name>.pid. A process
// already running under that pid file is left as it is.
func (n *Node) startDetached(name, bin string, args ...string) error {
	if pid, ok := n.running(name); ok {
		n.logf("%s already running (pid %d)", name, pid)
		return nil
	}
	if err := os.MkdirAll(filepath.Join(n.cfg.Root, "logs"), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(n.cfg.Run, "pids"), 0o755); err != nil {
		return err
	}
	logFile, err := os.OpenFile(filepath.Join(n.cfg.Root, "logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = n.cfg.Root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	n.logf("started %s (pid %d)", name, pid)
	return os.WriteFile(n.pidFile(name), []byte(strconv.Itoa(pid)), 0o644)
}

func (n *Node) pidFile(name string) string { return filepath.Join(n.cfg.Run, "pids", name+".pid") }

// running reports the pid of the node's process name if it is alive.
func (n *Node) running(name string) (int, bool) {
	b, err := os.ReadFile(n.pidFile(name))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	if syscall.Kill(pid, 0) != nil {
		return 0, false
	}
	// A pid may be reused after a reboot: the process must still be the one started.
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err != nil || strings.Contains(string(stat), ") Z ") {
		return 0, false
	}
	return pid, true
}

// stop ends the node's process name: SIGTERM, then SIGKILL after grace.
func (n *Node) stop(name string, grace time.Duration) error {
	pid, ok := n.running(name)
	if !ok {
		_ = os.Remove(n.pidFile(name))
		return nil
	}
	// The process leads its own session: signal the group, so children (shims excepted: they
	// start their own sessions) end too.
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if _, ok := n.running(name); !ok {
			n.logf("stopped %s", name)
			return os.Remove(n.pidFile(name))
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for range 50 {
		if _, ok := n.running(name); !ok {
			n.logf("killed %s", name)
			return os.Remove(n.pidFile(name))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("stop %s: pid %d still alive after SIGKILL", name, pid)
}

// run runs a short command and returns its error with its output.
func run(bin string, args ...string) error {
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return nil
}

func output(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), err, ee.Stderr)
		}
		return "", err
	}
	return string(out), nil
}
