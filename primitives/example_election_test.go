package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/primitives"
)

func ExampleNewElection() {
	cl, stop := exampleClient()
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // ends Observe

	el, err := primitives.NewElection(cl, "billing-scheduler", primitives.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	changes := el.Observe(ctx)
	fmt.Printf("seat: %+v\n", <-changes) // nobody leads yet

	lead, err := el.Campaign(ctx, "pod-7") // blocks until pod-7 leads
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("seat:", (<-changes).Value)

	// Another replica campaigns and waits its turn.
	next := make(chan latchkit.Lease)
	go func() {
		other, _ := primitives.NewElection(cl, "billing-scheduler", primitives.WithTTL(5*time.Second))
		l, err := other.Campaign(ctx, "pod-3")
		if err != nil {
			log.Fatal(err)
		}
		next <- l
	}()
	time.Sleep(50 * time.Millisecond) // (for the example: let pod-3 queue)

	// Lead under lead.Context(), which ends if leadership is lost, and pass
	// lead.Fence() to what the leader writes to. Resigning hands the seat
	// to pod-3 at once.
	_ = lead.Release(ctx)
	l := <-next
	info := <-changes
	fmt.Println("seat:", info.Value, "fence above the last:", info.Fence > lead.Fence())
	_ = l.Release(ctx)
	fmt.Printf("seat: %+v\n", <-changes)
	// Output:
	// seat: {Value: Fence:0}
	// seat: pod-7
	// seat: pod-3 fence above the last: true
	// seat: {Value: Fence:0}
}

func ExampleElection_Run() {
	cl, stop := exampleClient()
	defer stop()
	ctx := context.Background() // cancel it to stop campaigning (Run resigns)

	el, err := primitives.NewElection(cl, "nightly-export")
	if err != nil {
		log.Fatal(err)
	}
	err = el.Run(ctx, "pod-7", func(ctx context.Context, leader primitives.Lease) error {
		// Runs while pod-7 leads. ctx ends if leadership is lost
		// (context.Cause(ctx) matches primitives.ErrLeaseLost: Run waits for
		// fn, then campaigns again) or if Run's ctx ends. Stamp the
		// leader's writes with leader.Fence(), so that a store keeping the
		// highest fence it has seen refuses a deposed leader's late writes.
		info, _ := el.Leader(ctx)
		fmt.Println("leader:", info.Value, "same fence:", info.Fence == leader.Fence())
		return nil // the work is done: Run resigns and returns nil
	})
	fmt.Println("run:", err)
	_, err = el.Leader(ctx)
	fmt.Println("resigned:", errors.Is(err, primitives.ErrNoLeader))
	// Output:
	// leader: pod-7 same fence: true
	// run: <nil>
	// resigned: true
}

func ExampleSemaphore_AcquireN() {
	cl, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	// 20 connections' worth of work against the payments API; a bulk export
	// counts as 5. A FairSemaphore serves them in arrival order, and never
	// lets small requests overtake a large one at the head of the queue.
	api, _ := primitives.NewFairSemaphore(cl, "payments-api", 20)
	export, err := api.AcquireN(ctx, 5)
	if err != nil {
		log.Fatal(err)
	}
	call, _ := api.Acquire(ctx)
	_, err = api.TryAcquireN(ctx, 15) // 14 left
	fmt.Println(errors.Is(err, latchkit.ErrNotAcquired))
	_ = call.Release(ctx)
	_ = export.Release(ctx) // gives all 5 back
	all, err := api.TryAcquireN(ctx, 20)
	fmt.Println(err == nil)
	_ = all.Release(ctx)
	// Output:
	// true
	// true
}

func ExampleSemaphore_SetLimit() {
	cl, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	a, _ := primitives.NewSemaphore(cl, "workers", 2)
	other, _ := primitives.NewSemaphore(cl, "workers", 2) // another process

	// Stored in Redis: every client of the name grants by it from now on
	// (`latchctl limit workers 3` does the same).
	if err := a.SetLimit(ctx, 3); err != nil {
		log.Fatal(err)
	}
	var held []latchkit.Lease
	for i := 0; i < 3; i++ {
		l, err := other.TryAcquire(ctx)
		if err != nil {
			log.Fatal(err)
		}
		held = append(held, l)
	}
	fmt.Println("holders:", len(held))
	for _, l := range held {
		_ = l.Release(ctx)
	}
	// Output:
	// holders: 3
}
