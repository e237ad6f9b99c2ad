// Package proc starts the processes tests run beside them (redis-server,
// busy loops) so that none outlives the test process: each in its own
// process group, so a test can signal it and whatever it started, and on
// Linux killed with the test process should that die without its
// cleanups running (a timeout's panic, a SIGKILL, a Ctrl-C).
package proc

import "syscall"

// Attr is the SysProcAttr for a process a test starts beside it.
func Attr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(a)
	return a
}
