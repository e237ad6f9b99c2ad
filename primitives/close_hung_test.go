package primitives_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/drivers"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// closeDrivers make a client of addr as a user writes it: go-redis as the
// README recommends it (ContextTimeoutEnabled), then each driver at its
// defaults (drivers.Defaults), with how long the Client's goroutines may
// outlive a Close whose context ended, against a hung server (see
// Client.Close): closeSettle, and for go-redis ignoring contexts
// goredisAbandonSettle.
var closeDrivers = func() []closeDriver {
	ds := []closeDriver{{drivers.All[0].Name + " ContextTimeoutEnabled", drivers.All[0].New, closeSettle}}
	for i, d := range drivers.Defaults {
		settle := closeSettle
		if i == 0 {
			settle = goredisAbandonSettle
		}
		ds = append(ds, closeDriver{d.Name, d.New, settle})
	}
	return ds
}()

// closeDriver is one client configuration of TestCloseOnTimeAgainstHungOrDeadRedis.
type closeDriver struct {
	name   string
	mk     func(t testing.TB, addr string) backend.Backend
	settle time.Duration
}

// closeSettle is how long after a Close cut short by its context the
// Client's goroutines have to end (Client.Close's doc), plus scheduling.
const closeSettle = 2 * time.Second

// goredisAbandonSettle: a go-redis client without ContextTimeoutEnabled
// ignores contexts, so its adapter abandons a call at its context's end
// (backend.Await), and the call runs on until go-redis's own timeouts end
// it: ReadTimeout (3 s by default) on a connection's handshake, then on the
// command (4.8 s after Close returned, measured).
const goredisAbandonSettle = 8 * time.Second

// closeSlack is how late Close may return after its context ended: the
// scheduler's, not a call's.
const closeSlack = 150 * time.Millisecond

// TestCloseOnTimeAgainstHungOrDeadRedis: Close is bounded by its context
// whatever the driver and the server do, and the Client's goroutines end
// soon after. Issue 38, finding 1: with a lease held and a second Lock of
// the name waiting, SIGSTOP of the server, then Close(300ms): go-redis
// returned "give-backs still running" after about 4-5 s, rueidis 1.5 s,
// valkey-go 1.3 s (a background give-back ran with its whole window as
// its deadline, Close waited for it unbounded once its context ended, and
// the pub/sub connection's close blocked on the hung socket). Finding 2:
// after SIGKILL of the server, go-redis's Close(3s) returned "give-backs
// still running" at 3.0 s, where the others returned nil after about a
// second: go-redis's own dial retries make a refused call take 1.7 s, so
// a give-back never saw "refused at once" and retried for its window.
func TestCloseOnTimeAgainstHungOrDeadRedis(t *testing.T) {
	redistest.Require(t)
	// The fast lane: two of the five configurations (rueidis and
	// valkey-go, whose pub/sub connection's close blocks on a hung
	// socket); the long lane: all five.
	for _, d := range lane.Subset(closeDrivers, 1, 2) {
		for _, fault := range []string{"hung", "killed"} {
			// One at a time: the check of the Client's goroutines reads the
			// whole process's.
			t.Run(d.name+"/"+fault, func(t *testing.T) {
				srv := redistest.Start(t)
				before := goroutineIDs()
				cl, err := primitives.NewClient(d.mk(t, srv.Addr))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				// No call of the waiter's is in flight when the server
				// hangs: it attempts, subscribes, attempts again at once
				// (a release between the two would go unseen), then waits
				// for a release or the holder's TTL (2 s) and heartbeats
				// every 10 s. The server hangs once the second attempt has
				// returned. (A call of the caller's in flight then, which a
				// driver does not abandon when its context is cancelled,
				// valkey-go's or rueidis's on a quiet connection, would end
				// at the caller's deadline, 5 s later.)
				attempts := make(chan int, 8)
				mu, err := primitives.NewMutex(cl, "job", primitives.WithTTL(2*time.Second), primitives.WithWaiterTimeout(30*time.Second),
					primitives.WithMiddleware(attemptsTo(attempts)))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := mu.Lock(ctx); err != nil {
					t.Fatal(err)
				}
				<-attempts // the holder's
				waited := make(chan error, 1)
				const waiterDeadline = 5 * time.Second
				go func() {
					wctx, wcancel := context.WithTimeout(ctx, waiterDeadline)
					defer wcancel()
					_, err := mu.Lock(wctx) // queues behind the holder
					waited <- err
				}()
				for n := 0; n != 2; {
					select {
					case n = <-attempts:
					case <-time.After(5 * time.Second):
						t.Fatal("the waiter did not attempt twice")
					}
				}
				waitQueuedOn(t, srv, "latch:{job}:q", 1)
				waitSubscribed(t, srv)

				var cctx context.Context
				var ccancel context.CancelFunc
				if fault == "hung" {
					srv.Pause()
					defer srv.Resume()
					cctx, ccancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
				} else {
					srv.Kill()
					cctx, ccancel = context.WithTimeout(context.Background(), 3*time.Second)
				}
				defer ccancel()
				start := time.Now()
				err = cl.Close(cctx)
				took := time.Since(start)
				t.Logf("Close returned after %v: %v", took.Round(time.Millisecond), err)
				if fault == "hung" {
					// Nothing can be released: Close returns its context's
					// error, on time.
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("Close against a hung server: %v, want an error matching context.DeadlineExceeded", err)
					}
					if took > 300*time.Millisecond+closeSlack {
						t.Errorf("Close(300ms) against a hung server returned after %v", took.Round(time.Millisecond))
					}
				} else {
					// Refused at once: the give-backs stop trying within
					// about a second (plus go-redis's own dial retries),
					// and Close returns nil well before its deadline.
					if err != nil {
						t.Errorf("Close(3s) against a killed server: %v, want nil", err)
					}
					if took > 2500*time.Millisecond {
						t.Errorf("Close(3s) against a killed server returned after %v", took.Round(time.Millisecond))
					}
				}
				// The waiting Lock is withdrawn: it returns at once.
				const waitBound = time.Second
				select {
				case err := <-waited:
					if !errors.Is(err, latchkit.ErrClosed) {
						t.Errorf("the waiting Lock ended with %v, want an error matching ErrClosed", err)
					}
				case <-time.After(waitBound):
					t.Errorf("the waiting Lock had not returned %v after Close did:\n%s", waitBound, strings.Join(latchkitGoroutines(before), "\n\n"))
				}
				// The Client's goroutines end soon after, whatever the
				// server does.
				deadline := time.Now().Add(d.settle)
				for {
					left := latchkitGoroutines(before)
					if len(left) == 0 {
						t.Logf("the Client's goroutines ended %v after Close returned", time.Since(start.Add(took)).Round(time.Millisecond))
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%d latchkit goroutines left %v after Close returned:\n%s", len(left), d.settle, strings.Join(left, "\n\n"))
					}
					time.Sleep(20 * time.Millisecond)
				}
			})
		}
	}
}

// attemptsTo is a middleware that sends the number of every attempt to
// ch, dropping it when ch is full.
func attemptsTo(ch chan<- int) latchkit.Middleware {
	return func(next latchkit.Acquire) latchkit.Acquire {
		return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
			prev := req.OnAttempt
			req.OnAttempt = func(n int, err error) {
				select {
				case ch <- n:
				default:
				}
				if prev != nil {
					prev(n, err)
				}
			}
			return next(ctx, req)
		}
	}
}

// waitSubscribed waits until a client of srv has subscribed to a channel.
func waitSubscribed(t *testing.T, srv *redistest.Server) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, err := srv.Do(ctx, "PUBSUB", "CHANNELS")
		cancel()
		if chans, ok := v.([]any); err == nil && ok && len(chans) > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("nobody subscribed")
}

// waitQueuedOn waits until the sorted set key on srv holds n members.
func waitQueuedOn(t *testing.T, srv *redistest.Server, key string, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, err := srv.Do(ctx, "ZCARD", key)
		cancel()
		if err == nil && v == n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s never held %d members", key, n)
}

// TestRunEndsOnTimeAgainstHungRedis: Election.Run returns soon after its
// context ends or its Client's Close begins, with the server hung, under
// the default options (a 10 s TTL). Issue 38, finding 8: Run's
// resignation waited with a budget of the whole TTL: Run returned 10 s
// after Close began.
func TestRunEndsOnTimeAgainstHungRedis(t *testing.T) {
	redistest.Require(t)
	for _, end := range []string{"Close", "ctx"} {
		t.Run(end, func(t *testing.T) {
			srv := redistest.Start(t)
			defer srv.Resume()
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { rdb.Close() })
			cl, err := primitives.NewClient(goredis.New(rdb))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cl.Close(context.Background()) })
			e, err := primitives.NewElection(cl, "leader")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			leading := make(chan struct{})
			ran := make(chan error, 1)
			go func() {
				ran <- e.Run(ctx, "me", func(ctx context.Context, _ latchkit.Lease) error {
					close(leading)
					<-ctx.Done()
					return ctx.Err()
				})
			}()
			select {
			case <-leading:
			case <-time.After(5 * time.Second):
				t.Fatal("not leading after 5s")
			}
			srv.Pause()
			start := time.Now()
			closed := make(chan error, 1)
			if end == "Close" {
				go func() {
					cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
					defer ccancel()
					closed <- cl.Close(cctx)
				}()
			} else {
				cancel()
			}
			select {
			case err := <-ran:
				took := time.Since(start)
				t.Logf("Run returned %v after its %s: %v", took.Round(time.Millisecond), end, err)
				if took > 500*time.Millisecond {
					t.Errorf("Run returned %v after its %s, against a hung server", took.Round(time.Millisecond), end)
				}
				if want := map[string]error{"Close": latchkit.ErrClosed, "ctx": context.Canceled}[end]; !errors.Is(err, want) {
					t.Errorf("Run: %v, want an error matching %v", err, want)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("Run had not returned 15s after its %s", end)
			}
			if end == "Close" {
				err := <-closed
				if took := time.Since(start); took > 2*time.Second+closeSlack {
					t.Errorf("Close(2s) returned after %v", took.Round(time.Millisecond))
				}
				t.Logf("Close(2s): %v", err)
			}
		})
	}
}
