package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/primitives"
)

// A Semaphore lets at most limit holders in at once, across every process
// that uses its name: here two thumbnail workers.
func ExampleNewSemaphore() {
	cl, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	workers, err := primitives.NewSemaphore(cl, "thumbnailers", 2)
	if err != nil {
		log.Fatal(err)
	}
	a, _ := workers.Acquire(ctx) // Acquire waits for a permit; TryAcquire does not
	b, _ := workers.Acquire(ctx)
	_, err = workers.TryAcquire(ctx)
	fmt.Println("third worker:", errors.Is(err, primitives.ErrNotAcquired))

	// Work under a.Context(): it ends if the permit is lost. A holder that
	// crashes frees its permit when its TTL runs out.
	_ = a.Release(ctx)
	c, err := workers.TryAcquire(ctx)
	fmt.Println("after a release:", err)
	_ = b.Release(ctx)
	_ = c.Release(ctx)
	// Output:
	// third worker: true
	// after a release: <nil>
}

// A FairSemaphore serves its waiters in arrival order: a release hands the
// permit to the oldest waiter at once, so a newcomer cannot take it first.
func ExampleNewFairSemaphore() {
	cl, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	api, err := primitives.NewFairSemaphore(cl, "partner-api", 2)
	if err != nil {
		log.Fatal(err)
	}
	a, _ := api.Acquire(ctx)
	b, _ := api.Acquire(ctx)

	served := make(chan primitives.Lease)
	go func() {
		l, _ := api.Acquire(ctx) // queues: both permits are held
		served <- l
	}()
	time.Sleep(50 * time.Millisecond) // (for the example: let it queue)

	_ = a.Release(ctx) // the permit goes to the waiter, not back to the pool
	_, err = api.TryAcquire(ctx)
	fmt.Println("newcomer:", errors.Is(err, primitives.ErrNotAcquired))
	w := <-served
	fmt.Println("waiter served:", w != nil)
	_ = w.Release(ctx)
	_ = b.Release(ctx)
	// Output:
	// newcomer: true
	// waiter served: true
}

// A FairMutex grants the lock in arrival order: here three jobs queue
// behind a holder and get the lock one after the other, first come first
// served.
func ExampleNewFairMutex() {
	cl, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	mu, err := primitives.NewFairMutex(cl, "migrations")
	if err != nil {
		log.Fatal(err)
	}
	held, _ := mu.Lock(ctx)

	order := make(chan string, 3)
	for _, job := range []string{"first", "second", "third"} {
		go func() {
			l, _ := mu.Lock(ctx)
			order <- job
			_ = l.Release(ctx) // hands the lock to the next in line
		}()
		time.Sleep(50 * time.Millisecond) // (for the example: let it queue)
	}
	_ = held.Release(ctx)
	for range 3 {
		fmt.Println(<-order)
	}
	// Output:
	// first
	// second
	// third
}

// An RWLock is held by many readers at once, or by one writer alone.
func ExampleNewRWLock() {
	cl, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	catalog, err := primitives.NewRWLock(cl, "catalog")
	if err != nil {
		log.Fatal(err)
	}
	r1, _ := catalog.RLock(ctx)
	r2, err := catalog.TryRLock(ctx)
	fmt.Println("second reader:", err)
	_, err = catalog.TryLock(ctx)
	fmt.Println("writer while read:", errors.Is(err, primitives.ErrNotAcquired))

	_ = r1.Release(ctx)
	_ = r2.Release(ctx)
	w, err := catalog.Lock(ctx) // Lock waits for the readers to leave
	if err != nil {
		log.Fatal(err)
	}
	_, err = catalog.TryRLock(ctx)
	fmt.Println("reader while written:", errors.Is(err, primitives.ErrNotAcquired))
	_ = w.Release(ctx)
	// Output:
	// second reader: <nil>
	// writer while read: true
	// reader while written: true
}

// A MultiLock takes several names all or nothing: a transfer locks both
// accounts, each exactly as a Mutex of that name would.
func ExampleNewMultiLock() {
	cl, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	transfer, err := primitives.NewMultiLock(cl, []string{"account:alice", "account:bob"})
	if err != nil {
		log.Fatal(err)
	}
	bob, _ := primitives.NewMutex(cl, "account:bob")
	audit, _ := bob.Lock(ctx)
	_, err = transfer.TryLock(ctx) // takes neither name: bob's is held
	fmt.Println("transfer:", errors.Is(err, primitives.ErrNotAcquired))
	_ = audit.Release(ctx)

	lease, err := transfer.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// Each account's store checks its own name's fence. (Under middleware,
	// take the lease's latchkit.Innermost first.)
	fences := lease.(primitives.MultiLease).Fences()
	fmt.Println("bob's fence above the audit's:", fences["account:bob"] > audit.Fence())
	_ = lease.Release(ctx)
	// Output:
	// transfer: true
	// bob's fence above the audit's: true
}

// A ReentrantMutex can be locked again by the owner that holds it, as
// nested code of one request does; WithOwner puts the owner in the context.
func ExampleNewReentrantMutex() {
	cl, stop := exampleClient()
	defer stop()

	cart, err := primitives.NewReentrantMutex(cl, "cart:7")
	if err != nil {
		log.Fatal(err)
	}
	req := primitives.WithOwner(context.Background(), "request-41")
	outer, _ := cart.Lock(req)
	inner, err := cart.Lock(req) // re-entered at once, without a round trip
	fmt.Println("re-entered:", err)

	other := primitives.WithOwner(context.Background(), "request-42")
	_, err = cart.TryLock(other)
	fmt.Println("other owner:", errors.Is(err, primitives.ErrNotAcquired))
	_ = inner.Release(req) // one level: the lock is still held
	_, err = cart.TryLock(other)
	fmt.Println("after the inner release:", errors.Is(err, primitives.ErrNotAcquired))
	_ = outer.Release(req) // the outermost lease releases the lock
	l, err := cart.TryLock(other)
	fmt.Println("after the outer release:", err)
	_ = l.Release(other)
	// Output:
	// re-entered: <nil>
	// other owner: true
	// after the inner release: true
	// after the outer release: <nil>
}

// A Redlock is a lock over independent Redis servers, one Client each,
// granted by a majority of them: it stays available, and exclusive, while
// a minority is down.
func ExampleNewRedlock() {
	clients, servers, stop := exampleServers(3)
	defer stop()
	ctx := context.Background()

	lock, err := primitives.NewRedlock(clients, "nightly-report", primitives.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	lease, err := lock.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	first := lease.Fence()
	_ = lease.Release(ctx)

	servers[2].Close() // one of three down: two still make a majority
	lease, err = lock.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("locked, fence above the first:", lease.Fence() > first)
	_ = lease.Release(ctx)
	// Output:
	// locked, fence above the first: true
}

// exampleServers starts n embedded Redis servers, independent of one
// another, and returns a Client of each, the servers, and the function
// that closes them all.
func exampleServers(n int) ([]*primitives.Client, []*miniredis.Miniredis, func()) {
	var clients []*primitives.Client
	var servers []*miniredis.Miniredis
	var rdbs []*redis.Client
	for range n {
		m, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		cl, err := primitives.NewClient(goredis.New(rdb))
		if err != nil {
			log.Fatal(err)
		}
		clients, servers, rdbs = append(clients, cl), append(servers, m), append(rdbs, rdb)
	}
	return clients, servers, func() {
		for i := range n {
			_ = clients[i].Close(context.Background())
			rdbs[i].Close()
			servers[i].Close()
		}
	}
}
