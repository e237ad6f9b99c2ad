package kittest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// checkSlot: every key a script of the primitive touches, as the server's
// MONITOR shows it, has the hash tag of one of the keys the script was
// passed: on a Cluster a script runs on the node of those keys, and a key
// of another slot is not there. (A script may be passed the keys of
// several names where the primitive splits its work by slot on a Cluster,
// as a MultiLock does.) redis-server only (miniredis has no MONITOR).
func checkSlot(ctx context.Context, e *env, s Subject) error {
	if !e.real {
		e.t.Skip("MONITOR is redis-server's alone")
	}
	mon, err := monitor(ctx, e.addr)
	if err != nil {
		return err
	}
	if err := exercise(ctx, e, s, "slot"); err != nil {
		mon.stop()
		return err
	}
	lines := mon.stop()
	var keys []string // the running script's KEYS, when it is one of the subject's
	seen := 0         // the subject's scripts' commands looked at
	for _, line := range lines {
		src, args, err := monitorLine(line)
		if err != nil {
			return err
		}
		if src != "lua" {
			keys = nil
			if len(args) > 2 && (strings.EqualFold(args[0], "evalsha") || strings.EqualFold(args[0], "eval") ||
				strings.EqualFold(args[0], "evalsha_ro") || strings.EqualFold(args[0], "eval_ro")) {
				if n, err := strconv.Atoi(args[2]); err == nil && n > 0 && 3+n <= len(args) &&
					strings.HasPrefix(args[3], e.prefix) {
					keys = args[3 : 3+n]
				}
			}
			continue
		}
		if keys == nil {
			continue
		}
		seen++
		touched, err := e.keysOf(ctx, args)
		if err != nil {
			return err
		}
		for _, k := range touched {
			if !slices.ContainsFunc(keys, func(d string) bool { return hashTag(d) == hashTag(k) }) {
				return fmt.Errorf("a script passed %v ran %q on %s, a key of another hash slot (a Cluster node does not have it): pass it as one of the layout's keys", keys, strings.Join(args, " "), k)
			}
		}
	}
	if seen == 0 {
		return fmt.Errorf("MONITOR showed none of the commands of the scripts run under %s (%d lines)", e.prefix, len(lines))
	}
	return nil
}

// exercise runs what a primitive's scripts do on name: fill's grants
// (extended, asked their TTL), refused Try and given-up wait, then the
// releases.
func exercise(ctx context.Context, e *env, s Subject, name string) error {
	leases, err := fill(ctx, e, s, name, true)
	if err != nil {
		return err
	}
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			return err
		}
	}
	return nil
}

// keysOf is the keys of the command args, as the server reads them
// (COMMAND GETKEYS): none for a command without keys (TIME, PUBLISH).
func (e *env) keysOf(ctx context.Context, args []string) ([]string, error) {
	if e.commands == nil {
		info, err := e.rdb.Command(ctx).Result()
		if err != nil {
			return nil, fmt.Errorf("COMMAND: %w", err)
		}
		e.commands = info
	}
	if c := e.commands[strings.ToLower(args[0])]; c != nil && c.FirstKeyPos == 0 && !slices.Contains(c.Flags, "movablekeys") {
		return nil, nil
	}
	cmd := make([]any, 0, len(args)+2)
	cmd = append(cmd, "COMMAND", "GETKEYS")
	for _, a := range args {
		cmd = append(cmd, a)
	}
	keys, err := e.rdb.Do(ctx, cmd...).StringSlice()
	if err != nil && strings.Contains(err.Error(), "no key arguments") {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("COMMAND GETKEYS %s: %w", strings.Join(args, " "), err)
	}
	return keys, nil
}

// hashTag is the part of key Redis Cluster hashes: the text between its
// first '{' and the first '}' after it when that is not empty, else the
// whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// monitored is a MONITOR connection and the lines it has read.
type monitored struct {
	conn  net.Conn
	mu    sync.Mutex
	lines []string
	done  chan struct{}
}

// monitor starts MONITOR on addr: every command the server runs from then
// on, those scripts run included, is read until stop.
func monitor(ctx context.Context, addr string) (*monitored, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	r := bufio.NewReaderSize(conn, 1<<16)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		conn.Close()
		return nil, err
	}
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		conn.Close()
		return nil, fmt.Errorf("MONITOR: %q, %v", line, err)
	}
	m := &monitored{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if strings.HasPrefix(line, "+") {
				m.mu.Lock()
				m.lines = append(m.lines, strings.TrimRight(line[1:], "\r\n"))
				m.mu.Unlock()
			}
		}
	}()
	return m, nil
}

// stop ends the MONITOR and returns the lines read.
func (m *monitored) stop() []string {
	time.Sleep(50 * time.Millisecond) // the last lines on their way
	m.conn.Close()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lines
}

// monitorLine parses a MONITOR line (`1700000000.000001 [0 127.0.0.1:5000]
// "SET" "k" "v"`) into its source ("lua" for a script's command) and its
// arguments, unquoted.
func monitorLine(line string) (src string, args []string, err error) {
	open, shut := strings.IndexByte(line, '['), strings.IndexByte(line, ']')
	if open < 0 || shut < open {
		return "", nil, fmt.Errorf("MONITOR line %q: no source", line)
	}
	if f := strings.Fields(line[open+1 : shut]); len(f) == 2 {
		src = f[1]
	}
	rest := line[shut+1:]
	for {
		rest = strings.TrimLeft(rest, " ")
		if rest == "" {
			return src, args, nil
		}
		if rest[0] != '"' {
			return "", nil, fmt.Errorf("MONITOR line %q: an argument not quoted", line)
		}
		var b strings.Builder
		i := 1
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] != '\\' || i+1 >= len(rest) {
				b.WriteByte(rest[i])
				continue
			}
			i++
			switch rest[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'x':
				if i+2 < len(rest) {
					if v, err := strconv.ParseUint(rest[i+1:i+3], 16, 8); err == nil {
						b.WriteByte(byte(v))
						i += 2
						continue
					}
				}
				b.WriteByte('x')
			default:
				b.WriteByte(rest[i])
			}
		}
		if i >= len(rest) {
			return "", nil, fmt.Errorf("MONITOR line %q: an argument not closed", line)
		}
		args = append(args, b.String())
		rest = rest[i+1:]
	}
}
