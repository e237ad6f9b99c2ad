package redigo_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"

	"github.com/latchkit/latchkit/backend/redigo"
	"github.com/latchkit/latchkit/primitives"
)

func Example() {
	m, err := miniredis.Run() // an embedded Redis; in production, your server
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	addr := m.Addr()
	pool := &redis.Pool{
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr, redis.DialConnectTimeout(time.Second))
		},
		MaxIdle:     8,
		IdleTimeout: time.Minute,
	}
	defer pool.Close()

	// One Client per Redis, shared by the primitives made from it.
	cl, err := primitives.NewClient(redigo.New(pool))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { // on shutdown: releases what is still held, stops its goroutines
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := cl.Close(ctx); err != nil {
			log.Print(err)
		}
	}()

	mu, err := primitives.NewMutex(cl, "invoice:42", primitives.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := mu.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held", lease.Name())
	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: held invoice:42
}
