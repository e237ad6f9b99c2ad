package proc

import "syscall"

// setDeathSignal makes the kernel kill the child when the thread that
// started it exits. Go's threads exit only with a goroutine locked to one
// (runtime.LockOSThread), which the tests do not use, so in effect when
// the test process ends.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
