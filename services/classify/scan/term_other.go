//go:build !unix

package scan

import "os"

// terminalWidth is 0 where the terminal size is not read: COLUMNS or 120 is used.
func terminalWidth(*os.File) int { return 0 }
