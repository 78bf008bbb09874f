package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// "No room": the stream cannot store the relay's next event for now,
// whatever the event is. The relay never dead-letters for it: it holds
// the event (and everything after it), confirms nothing past it, and
// retries until there is room. What is missing decides what frees it, so
// the relay and `status` read the stream, its account and its cluster to
// name the limit, with the nats command that lifts it.

// Reasons a stream has no room: the reason label of
// outbox_relay_stream_blocked and Blocked.Reason.
const (
	// RoomMaxMsgs: the stream holds max_msgs messages (discard new).
	RoomMaxMsgs = "max_msgs"
	// RoomMaxBytes: the next message would take the stream past max_bytes.
	RoomMaxBytes = "max_bytes"
	// RoomMaxMsgsPerSubject: a subject holds max_msgs_per_subject messages
	// (discard new per subject).
	RoomMaxMsgsPerSubject = "max_msgs_per_subject"
	// RoomAccountStorage, RoomAccountMemory: the account's JetStream quota
	// for file (memory) storage is used up.
	RoomAccountStorage = "account_storage"
	RoomAccountMemory  = "account_memory"
	// RoomServerStorage: a server has no JetStream storage left
	// ("insufficient resources": its max_file_store, or the disk).
	RoomServerStorage = "server_storage"
	// RoomQuorum: the stream (or JetStream's meta group) has no leader:
	// too few of its servers are up.
	RoomQuorum = "quorum"
	// RoomStore: the server failed to store for another reason (a disk
	// error).
	RoomStore = "store"
)

// RoomReasons lists every reason, in the order of the constants.
func RoomReasons() []string {
	return []string{RoomMaxMsgs, RoomMaxBytes, RoomMaxMsgsPerSubject, RoomAccountStorage,
		RoomAccountMemory, RoomServerStorage, RoomQuorum, RoomStore}
}

// JetStream error codes of "no room" (with errCodeStoreFailed), and the
// answer of a JetStream without a meta leader.
const (
	errCodeAccountResources      = 10002 // resource limits exceeded for account
	errCodeClusterNotAvailable   = 10008 // JetStream system temporarily unavailable
	errCodeInsufficientResources = 10023 // insufficient resources
)

// Blocked says why a stream cannot store the relay's next event, and what
// frees it.
type Blocked struct {
	Stream string `json:"stream"`
	// Reason is one of RoomReasons.
	Reason string `json:"reason"`
	// What names the limit and how far it is used.
	What string `json:"what"`
	// Fix is what frees it, with the nats command.
	Fix string `json:"fix"`
}

// Error makes a Blocked usable as the error a retry loop logs.
func (b *Blocked) Error() string { return b.What + ": " + b.Fix }

// noRoom reports whether err is a refusal for want of room: the relay
// holds the event and retries, and reads the stream to say which limit.
func noRoom(err error) bool {
	var se *ServerError
	if !errors.As(err, &se) {
		return false
	}
	switch se.ErrCode {
	case errCodeStoreFailed, errCodeAccountResources, errCodeInsufficientResources:
		return true
	}
	return false
}

// roomRefused names what a publish refusal err says is missing, reading
// info (the stream, as of now; nil when it could not be read) and, for the
// account's quota, account (nil when it could not be read). need is the
// size of the refused message. It returns nil when err is no refusal for
// want of room.
func roomRefused(err error, info *natsjs.StreamInfo, account *natsjs.AccountInfo, name string, need uint64) *Blocked {
	var se *ServerError
	if !errors.As(err, &se) {
		return nil
	}
	switch se.ErrCode {
	case errCodeStoreFailed:
		if info == nil {
			return storeFailed(name, se)
		}
		if b := streamLimits(info, need); b != nil {
			return b
		}
		cfg := info.Config
		switch {
		case cfg.MaxMsgsPerSubject > 0 && cfg.DiscardNewPerSubject:
			return perSubject(info)
		case cfg.MaxBytes > 0:
			// The server counts a message's size its own way: at the
			// edge, trust its refusal.
			return maxBytes(info)
		}
		return storeFailed(name, se)
	case errCodeAccountResources:
		storage := natsjs.FileStorage
		if info != nil {
			storage = info.Config.Storage
		}
		return accountQuota(name, storage, replicasOf(info), account)
	case errCodeInsufficientResources:
		return serverStorage(name, info)
	}
	return nil
}

// CheckRoom says what keeps the stream from storing another message of
// the average size it holds now, reading its state and limits (discard
// new), its cluster's replicas and, when the account has a storage quota,
// the account's use; nil when nothing does. `status` uses it: unlike the
// relay it knows no refused message, so "no room" means less room than
// two messages of the average size.
func CheckRoom(ctx context.Context, js natsjs.JetStream, info *natsjs.StreamInfo) *Blocked {
	if b := quorum(info); b != nil {
		return b
	}
	need := uint64(1024)
	if info.State.Msgs > 0 {
		need = 2 * (info.State.Bytes / info.State.Msgs)
	}
	if b := streamLimits(info, need); b != nil {
		return b
	}
	account, err := js.AccountInfo(ctx)
	if err != nil {
		return unavailable(info.Config.Name, err)
	}
	if accountFull(account, info.Config.Storage, replicasOf(info), need) {
		return accountQuota(info.Config.Name, info.Config.Storage, replicasOf(info), account)
	}
	return nil
}

// StreamUnreadable says whether err, from reading the stream's info, means
// JetStream cannot answer for want of a quorum; nil when it does not.
func StreamUnreadable(name string, err error) *Blocked { return unavailable(name, err) }

// unavailable returns the Blocked of a JetStream that answers a request
// with "temporarily unavailable": a clustered JetStream without a meta
// leader; nil for any other error.
func unavailable(name string, err error) *Blocked {
	var apiErr *natsjs.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeClusterNotAvailable {
		return nil
	}
	return &Blocked{Stream: name, Reason: RoomQuorum,
		What: fmt.Sprintf("JetStream cannot answer for stream %q (%s): its cluster has no meta leader, too few of its servers are up", name, apiErr.Description),
		Fix:  "start the NATS servers that are down (`nats server report jetstream` lists the cluster's servers); the relay resumes once JetStream answers"}
}

// streamLimits returns the limit of info that leaves no room for a
// message of need bytes (discard new), or nil.
func streamLimits(info *natsjs.StreamInfo, need uint64) *Blocked {
	cfg, st := info.Config, info.State
	if cfg.Discard != natsjs.DiscardNew {
		return nil
	}
	switch {
	case cfg.MaxMsgs > 0 && st.Msgs >= uint64(cfg.MaxMsgs):
		return &Blocked{Stream: cfg.Name, Reason: RoomMaxMsgs,
			What: fmt.Sprintf("stream %q holds %d messages, its max_msgs is %d (discard new refuses more)", cfg.Name, st.Msgs, cfg.MaxMsgs),
			Fix: fmt.Sprintf("raise max_msgs: nats stream edit %s --max-msgs %d (or -1 for no limit); the relay retries until it has room",
				cfg.Name, max(2*cfg.MaxMsgs, int64(st.Msgs)+cfg.MaxMsgs))}
	case cfg.MaxBytes > 0 && st.Bytes+need > uint64(cfg.MaxBytes):
		return maxBytes(info)
	}
	return nil
}

func maxBytes(info *natsjs.StreamInfo) *Blocked {
	cfg, st := info.Config, info.State
	return &Blocked{Stream: cfg.Name, Reason: RoomMaxBytes,
		What: fmt.Sprintf("stream %q holds %s, its max_bytes is %s (discard new refuses more)", cfg.Name, sizeOf(st.Bytes), sizeOf(uint64(cfg.MaxBytes))),
		Fix: fmt.Sprintf("raise max_bytes: nats stream edit %s --max-bytes %d (or -1 for no limit); the relay retries until it has room",
			cfg.Name, max(2*uint64(cfg.MaxBytes), st.Bytes+uint64(cfg.MaxBytes)))}
}

func perSubject(info *natsjs.StreamInfo) *Blocked {
	cfg := info.Config
	return &Blocked{Stream: cfg.Name, Reason: RoomMaxMsgsPerSubject,
		What: fmt.Sprintf("a subject of stream %q holds max_msgs_per_subject (%d) messages (discard new per subject refuses more)", cfg.Name, cfg.MaxMsgsPerSubject),
		Fix: fmt.Sprintf("raise max_msgs_per_subject: nats stream edit %s --max-msgs-per-subject %d (or -1 for no limit); the relay retries until it has room",
			cfg.Name, 2*cfg.MaxMsgsPerSubject)}
}

func storeFailed(name string, se *ServerError) *Blocked {
	return &Blocked{Stream: name, Reason: RoomStore,
		What: fmt.Sprintf("stream %q could not store the event (%s)", name, se.Description),
		Fix:  "check the disk and the log of the NATS server that leads the stream (nats stream info " + name + " names it); the relay retries until it is stored"}
}

// accountFull reports whether the account's quota for storage leaves less
// than need bytes (for each of replicas copies).
func accountFull(account *natsjs.AccountInfo, storage natsjs.StorageType, replicas int, need uint64) bool {
	tier := tierOf(account, replicas)
	used, limit := tier.Store, tier.Limits.MaxStore
	if storage == natsjs.MemoryStorage {
		used, limit = tier.Memory, tier.Limits.MaxMemory
	}
	return limit > 0 && used+need*uint64(max(replicas, 1)) > uint64(limit)
}

// tierOf is the account's usage and limits that apply to a stream of
// replicas replicas: its tier (R1, R3) when the account has tiered
// limits, else its totals.
func tierOf(account *natsjs.AccountInfo, replicas int) natsjs.Tier {
	if t, ok := account.Tiers[fmt.Sprintf("R%d", max(replicas, 1))]; ok {
		return t
	}
	return account.Tier
}

func accountQuota(name string, storage natsjs.StorageType, replicas int, account *natsjs.AccountInfo) *Blocked {
	reason, kind, limitName, nsc := RoomAccountStorage, "file storage", "max_file", "--js-disk-storage"
	if storage == natsjs.MemoryStorage {
		reason, kind, limitName, nsc = RoomAccountMemory, "memory storage", "max_mem", "--js-mem-storage"
	}
	what := fmt.Sprintf("the account of stream %q has used up its JetStream %s quota", name, kind)
	if account != nil {
		tier := tierOf(account, replicas)
		used, limit := tier.Store, tier.Limits.MaxStore
		if storage == natsjs.MemoryStorage {
			used, limit = tier.Memory, tier.Limits.MaxMemory
		}
		if limit > 0 {
			what += fmt.Sprintf(" (%s of %s)", sizeOf(used), sizeOf(uint64(limit)))
		}
	}
	return &Blocked{Stream: name, Reason: reason, What: what,
		Fix: fmt.Sprintf("raise the account's limit (%s in the account's jetstream block of the server configuration, then nats-server --signal reload; or nsc edit account NAME %s SIZE and nsc push), or free room in the account's other streams (nats stream purge or rm); `nats account info` shows the use; the relay retries until it has room",
			limitName, nsc)}
}

func serverStorage(name string, info *natsjs.StreamInfo) *Blocked {
	where := "the NATS server that leads it"
	if info != nil && info.Cluster != nil && info.Cluster.Leader != "" {
		where = fmt.Sprintf("NATS server %s (its leader)", info.Cluster.Leader)
	}
	return &Blocked{Stream: name, Reason: RoomServerStorage,
		What: fmt.Sprintf("stream %q cannot store: %s has no JetStream storage left (insufficient resources: its max_file_store or max_memory_store, or the disk)", name, where),
		Fix:  "raise max_file_store in the servers' jetstream block and reload them (nats-server --signal reload), or free disk; `nats server report jetstream` shows each server's use; the relay retries until it has room"}
}

// peerGone is how long a replica may stay silent before it counts as lost
// (a live follower that lags is heard from every heartbeat).
const peerGone = 5 * time.Second

// quorum returns the Blocked of a clustered stream without a leader, or
// whose leader has not heard from enough replicas for a quorum within
// peerGone; nil otherwise.
func quorum(info *natsjs.StreamInfo) *Blocked { return quorumWithin(info, peerGone) }

// quorumWithin is quorum with replicas silent for longer than fresh
// counted as lost.
func quorumWithin(info *natsjs.StreamInfo, fresh time.Duration) *Blocked {
	if info == nil || info.Cluster == nil {
		return nil
	}
	c, name := info.Cluster, info.Config.Name
	replicas := max(info.Config.Replicas, 1)
	need := replicas/2 + 1
	var lost []string
	up := 0
	if c.Leader != "" {
		up = 1
	}
	for _, p := range c.Replicas {
		if p.Offline || !p.Current || p.Active > fresh {
			lost = append(lost, p.Name)
			continue
		}
		up++
	}
	if c.Leader != "" && up >= need {
		return nil
	}
	what := fmt.Sprintf("stream %q has no leader", name)
	if c.Leader != "" {
		what = fmt.Sprintf("stream %q lost its quorum: its leader %s hears from %d of its %d servers, it needs %d", name, c.Leader, up, replicas, need)
	}
	if len(lost) > 0 {
		what += fmt.Sprintf(" (replicas out of reach: %s)", strings.Join(lost, ", "))
	}
	return &Blocked{Stream: name, Reason: RoomQuorum, What: what,
		Fix: fmt.Sprintf("start the NATS servers that are down, those of the stream's replicas first (nats stream info %s lists them, nats server report jetstream the cluster's servers); the relay resumes once %d of its %d servers are up", name, need, replicas)}
}

func replicasOf(info *natsjs.StreamInfo) int {
	if info == nil {
		return 1
	}
	return max(info.Config.Replicas, 1)
}

// sizeOf prints n bytes for people.
func sizeOf(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB (%d bytes)", float64(n)/float64(div), "KMGTPE"[exp], n)
}
