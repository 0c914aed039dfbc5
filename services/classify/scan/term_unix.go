//go:build unix

package scan

import (
	"os"

	"golang.org/x/sys/unix"
)

// terminalWidth is the number of columns of the terminal f is, 0 when it is none.
func terminalWidth(f *os.File) int {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}
