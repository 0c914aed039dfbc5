package scan

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// openPty opens a pseudo-terminal of cols columns: the terminal side (what a program
// writes to) and the controller side (what the terminal shows).
func openPty(t *testing.T, cols uint16) (tty, ctl *os.File) {
	t.Helper()
	ctl, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal on this machine: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(ctl.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetUint32(int(ctl.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: cols}); err != nil {
		t.Fatalf("set pty size: %v", err)
	}
	return tty, ctl
}

// On a terminal, the table is fitted to the terminal's width, not to COLUMNS.
func TestTableFitsARealTerminal(t *testing.T) {
	tty, ctl := openPty(t, 97)
	defer ctl.Close()
	if got := outputWidth(tty, func(string) string { return "200" }); got != 97 {
		t.Errorf("width of a 97-column terminal: %d", got)
	}
	var shown bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		_, _ = io.Copy(&shown, ctl) // ends with EIO once the terminal side is closed
	}()
	t.Setenv("COLUMNS", "200")
	var errOut bytes.Buffer
	code := Main(append([]string{"--format", "table", "--progress", "never"}, inputsOf(t)...), nil, tty, &errOut)
	tty.Close()
	<-read
	if code != ExitRemoved {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	out := strings.ReplaceAll(shown.String(), "\r\n", "\n")
	if !strings.Contains(out, "cut to 97 columns") || !strings.Contains(out, "removed-api") {
		t.Fatalf("terminal shows:\n%s", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if utf8.RuneCountInString(l) > 97 {
			t.Errorf("line of %d runes on a 97-column terminal:\n%s", utf8.RuneCountInString(l), l)
		}
	}
}
