package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is one redis-server process this program started on loopback.
type server struct {
	Addr  string
	cmd   *exec.Cmd
	admin *redis.Client // for INFO: no counting hook, not part of any contender
}

// startServer starts redis-server on a free 127.0.0.1 port without
// persistence and waits until it answers PING.
func startServer(ctx context.Context) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no")
	// Its own process group: a Ctrl-C in the terminal reaches only us, and
	// we stop it ourselves.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server (is it on PATH?): %w", err)
	}
	s := &server{Addr: fmt.Sprintf("127.0.0.1:%d", port), cmd: cmd}
	s.admin = redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := s.admin.Ping(ctx).Err()
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer: %w", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// stop kills the server by its pid and reaps it.
func (s *server) stop() {
	s.admin.Close()
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(os.Kill)
		_ = s.cmd.Wait()
	}
}

// version is the server's redis_version.
func (s *server) version(ctx context.Context) string {
	info, err := s.info(ctx, "server")
	if err != nil {
		return "?"
	}
	return info["redis_version"]
}

// info runs INFO section and returns its key:value lines.
func (s *server) info(ctx context.Context, section string) (map[string]string, error) {
	txt, err := s.admin.Info(ctx, section).Result()
	if err != nil {
		return nil, fmt.Errorf("INFO %s on %s: %w", section, s.Addr, err)
	}
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(txt))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if ok {
			m[k] = v
		}
	}
	return m, nil
}

// serverStats is what a contended run reads from the server before and after.
type serverStats struct {
	calls     int64   // commandstats calls, scripts' inner commands included, INFO excluded
	subscribe int64   // (un)subscribe-family calls: sent by clients on their own connections
	cpu       float64 // used_cpu_sys + used_cpu_user, seconds
	sys       float64 // used_cpu_sys alone: the kernel's part (sockets, scheduling)
	// scriptUsec is the time Redis spent running scripts (EVAL, EVALSHA
	// and their read-only forms, the commands they run included), µs:
	// the work a request asks for, where cpu also counts reading,
	// parsing, replying and pub/sub delivery.
	scriptUsec int64
	byCommand  map[string]int64
}

// stats reads INFO commandstats and INFO cpu.
func (s *server) stats(ctx context.Context) (serverStats, error) {
	st := serverStats{byCommand: map[string]int64{}}
	cs, err := s.info(ctx, "commandstats")
	if err != nil {
		return st, err
	}
	for k, v := range cs {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok || name == "info" {
			continue
		}
		callsField, _, _ := strings.Cut(v, ",")
		n, err := strconv.ParseInt(strings.TrimPrefix(callsField, "calls="), 10, 64)
		if err != nil {
			return st, fmt.Errorf("parse %s=%s: %w", k, v, err)
		}
		st.calls += n
		st.byCommand[name] = n
		if scriptCommands[name] {
			us, err := usecOf(v)
			if err != nil {
				return st, fmt.Errorf("parse %s=%s: %w", k, v, err)
			}
			st.scriptUsec += us
		}
		if strings.HasSuffix(name, "subscribe") {
			st.subscribe += n
		}
	}
	cpu, err := s.info(ctx, "cpu")
	if err != nil {
		return st, err
	}
	for _, k := range []string{"used_cpu_sys", "used_cpu_user"} {
		f, err := strconv.ParseFloat(cpu[k], 64)
		if err != nil {
			return st, fmt.Errorf("parse %s=%q: %w", k, cpu[k], err)
		}
		st.cpu += f
		if k == "used_cpu_sys" {
			st.sys = f
		}
	}
	if st.calls == 0 {
		return st, errors.New("INFO commandstats: no commands counted")
	}
	return st, nil
}

// scriptCommands are the commands that run a script.
var scriptCommands = map[string]bool{"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true, "fcall": true, "fcall_ro": true}

// usecOf reads the usec field of a commandstats value
// ("calls=…,usec=…,usec_per_call=…").
func usecOf(v string) (int64, error) {
	for _, f := range strings.Split(v, ",") {
		if us, ok := strings.CutPrefix(f, "usec="); ok {
			return strconv.ParseInt(us, 10, 64)
		}
	}
	return 0, errors.New("no usec field")
}

// sub is after minus before.
func (a serverStats) sub(b serverStats) serverStats {
	d := serverStats{calls: a.calls - b.calls, subscribe: a.subscribe - b.subscribe, cpu: a.cpu - b.cpu,
		sys: a.sys - b.sys, scriptUsec: a.scriptUsec - b.scriptUsec, byCommand: map[string]int64{}}
	for k, v := range a.byCommand {
		if v -= b.byCommand[k]; v != 0 {
			d.byCommand[k] = v
		}
	}
	return d
}
