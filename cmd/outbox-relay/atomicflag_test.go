package main

import (
	"strings"
	"testing"
)

// TestAtomicTransactionsFlag: off by default; OUTBOX_ATOMIC_TRANSACTIONS
// turns it on for the relay and for the stream it creates or checks; the
// polling source, which has no transactions, refuses it.
func TestAtomicTransactionsFlag(t *testing.T) {
	run, err := parseRun(t, map[string]string{"OUTBOX_PG_URL": "postgres://u@h/app"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := run.config()
	if err != nil || cfg.AtomicTransactions || cfg.StreamSpec().Atomic {
		t.Fatalf("default: atomic %v (stream %v), err %v; want off", cfg.AtomicTransactions, cfg.StreamSpec().Atomic, err)
	}
	run, err = parseRun(t, map[string]string{"OUTBOX_PG_URL": "postgres://u@h/app", "OUTBOX_ATOMIC_TRANSACTIONS": "true"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err = run.config()
	if err != nil || !cfg.AtomicTransactions || !cfg.StreamSpec().Atomic {
		t.Fatalf("OUTBOX_ATOMIC_TRANSACTIONS=true: atomic %v (stream %v), err %v; want on", cfg.AtomicTransactions, cfg.StreamSpec().Atomic, err)
	}
	run, err = parseRun(t, map[string]string{"OUTBOX_PG_URL": "postgres://u@h/app"}, "--atomic-transactions", "--source", "poll")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.config(); err == nil || !strings.Contains(err.Error(), "--source wal") {
		t.Fatalf("with --source poll: %v, want a refusal naming --source wal", err)
	}
}
