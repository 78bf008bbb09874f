package replication

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the replication side's Prometheus collectors.
type Metrics struct {
	Connected    prometheus.Gauge
	Reconnects   prometheus.Counter
	Events       prometheus.Counter
	Ignored      prometheus.Counter
	Blocked      prometheus.Gauge
	ConfirmedLSN prometheus.Gauge
	SlotLagBytes prometheus.Gauge
	SlotActive   prometheus.Gauge
	WALStatus    *prometheus.GaugeVec
	RetainedWAL  prometheus.Gauge
	// SafeWALSize has no labels; its one series is removed while the
	// server sets no limit (max_slot_wal_keep_size = -1).
	SafeWALSize *prometheus.GaugeVec
}

// NewMetrics creates the collectors and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_relay_replication_connected",
			Help: "1 while this relay streams from the slot, 0 otherwise (a standby shows 0).",
		}),
		Reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_replication_reconnects_total",
			Help: "Replication sessions that ended with an error and were reopened.",
		}),
		Events: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_events_decoded_total",
			Help: "Outbox inserts decoded from the WAL (replays after a reconnect included).",
		}),
		Ignored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_changes_ignored_total",
			Help: "UPDATE, DELETE and TRUNCATE of the outbox table received and ignored.",
		}),
		Blocked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_relay_replication_blocked",
			Help: "1 while decoding waits for the publisher to have room (NATS slow or down).",
		}),
		ConfirmedLSN: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_relay_confirmed_lsn",
			Help: "Flush LSN last confirmed to Postgres, as a number.",
		}),
		SlotLagBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_relay_slot_lag_bytes",
			Help: "The server's WAL position (pg_current_wal_lsn(), pg_last_wal_replay_lsn() on a standby) - confirmed_flush_lsn of the slot: WAL the relay has not confirmed.",
		}),
		SlotActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_relay_slot_active",
			Help: "1 when some process streams from the slot.",
		}),
		WALStatus: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_slot_wal_status",
			Help: "1 for the slot's current wal_status (reserved, extended, unreserved, lost).",
		}, []string{"status"}),
		RetainedWAL: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_relay_slot_retained_wal_bytes",
			Help: "The server's WAL position (pg_current_wal_lsn(), pg_last_wal_replay_lsn() on a standby) - restart_lsn of the slot: WAL the server keeps on disk for it.",
		}),
		SafeWALSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_slot_safe_wal_size_bytes",
			Help: "safe_wal_size of the slot: WAL that can still be written before the slot risks invalidation (max_slot_wal_keep_size); absent when there is no limit.",
		}, nil),
	}
	reg.MustRegister(m.Connected, m.Reconnects, m.Events, m.Ignored, m.Blocked, m.ConfirmedLSN, m.SlotLagBytes, m.SlotActive, m.WALStatus,
		m.RetainedWAL, m.SafeWALSize)
	return m
}
