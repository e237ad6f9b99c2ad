package proc

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestChildDiesWithParent starts a helper process (this test binary) that
// starts a child with Attr and reports its pid; then the helper is killed
// with SIGKILL, so no cleanup of its runs. The child must be gone soon
// after (a zombie not yet reaped counts as gone).
func TestChildDiesWithParent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux's")
	}
	if os.Getenv("PROC_HELPER") == "1" {
		return
	}
	helper := exec.Command(os.Args[0], "-test.run=^TestHelperStartsChild$")
	helper.Env = append(os.Environ(), "PROC_HELPER=1")
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = helper.Process.Kill()
		t.Fatalf("helper said nothing: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "child ")))
	if err != nil {
		_ = helper.Process.Kill()
		t.Fatalf("helper said %q", line)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if !alive(pid) {
		t.Fatalf("child %d not running while its parent runs", pid)
	}
	_ = helper.Process.Kill()
	_ = helper.Wait()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if !alive(pid) {
			return
		}
	}
	t.Fatalf("child %d still runs 5s after its parent was killed", pid)
}

// TestHelperStartsChild is the helper of TestChildDiesWithParent: it
// starts `sleep 60` with Attr, prints its pid and waits to be killed.
func TestHelperStartsChild(t *testing.T) {
	if os.Getenv("PROC_HELPER") != "1" {
		t.Skip("run by TestChildDiesWithParent")
	}
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = Attr()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("child " + strconv.Itoa(cmd.Process.Pid) + "\n")
	time.Sleep(time.Minute)
}

// alive reports whether pid runs: it exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
