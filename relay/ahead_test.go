package relay

import (
	"context"
	"errors"
	"testing"
)

func TestAheadDiscardReleasesWhatNobodyTook(t *testing.T) {
	released := 0
	a := runAhead(context.Background(), func(context.Context) (int, error) { return 7, nil })
	a.discard(func(v int) { released += v })
	if released != 7 {
		t.Fatalf("released %d, want the unclaimed result 7", released)
	}

	b := runAhead(context.Background(), func(context.Context) (int, error) { return 5, nil })
	if v, err := b.wait(); v != 5 || err != nil {
		t.Fatalf("wait = %d, %v", v, err)
	}
	b.discard(func(v int) { released += v })
	if released != 7 {
		t.Fatal("discard released a result its waiter owns")
	}
}

func TestAheadDiscardCancels(t *testing.T) {
	a := runAhead(context.Background(), func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 1, ctx.Err()
	})
	a.discard(func(int) { t.Error("released the result of a cancelled step") })
	if _, err := a.wait(); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want the cancellation", err)
	}
}
