// Command hold takes a lock through redlock-agent and works until the lock
// is lost:
//
//	go run ./examples/hold ./redlock.sock nightly-report
//
// It acquires, extends and releases the lock once, then holds it (the
// agent renews it) and works until it is lost. Take it away as an operator
// would:
//
//	curl --unix-socket ./redlock-admin.sock -X POST localhost/v1/locks/nightly-report/force-release
//
// and it prints the loss notice at once (force_released) and exits 1.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"redlock-agent.example/redlock"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: hold SOCKET [RESOURCE]")
		os.Exit(64)
	}
	resource := "nightly-report"
	if len(os.Args) > 2 {
		resource = os.Args[2]
	}
	c := redlock.New(os.Args[1])
	ctx := context.Background()

	lock, err := c.Acquire(ctx, resource, redlock.LockOptions{TTL: 10 * time.Second, Wait: 2 * time.Second, Owner: "go-example"})
	if errors.Is(err, redlock.ErrTaken) {
		fmt.Fprintln(os.Stderr, "hold: someone else has", resource)
		os.Exit(75)
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "hold:", err)
		os.Exit(69)
	}
	fmt.Printf("acquired %s, valid for %v\n", lock.Resource, lock.Validity)
	if err := lock.Extend(ctx, 10*time.Second); err != nil {
		fmt.Fprintln(os.Stderr, "hold:", err)
		os.Exit(69)
	}
	fmt.Printf("extended, valid for %v\n", lock.Validity)
	released, err := lock.Release(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hold:", err)
		os.Exit(69)
	}
	fmt.Printf("released: %v\n", released.Released)

	h, err := c.Hold(ctx, resource, redlock.HoldOptions{LockOptions: redlock.LockOptions{TTL: 2 * time.Second, Wait: 5 * time.Second, Owner: "go-example"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "hold:", err)
		os.Exit(69)
	}
	defer h.Close()
	fmt.Printf("held %s until %s, renewed by the agent\n", resource, h.ValidUntil().Format(time.RFC3339Nano))
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			fmt.Println("working")
		case <-h.Lost():
			fmt.Printf("stopped: the lock on %s was lost: %s\n", resource, h.Reason())
			h.Close()
			os.Exit(1)
		}
	}
}
