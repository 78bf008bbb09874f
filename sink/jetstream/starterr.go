package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Which errors of the stream's set-up are configuration errors, to end
// the relay with their fix, and which are outages to wait out (the
// servers down, a cluster without a leader, a timeout).

// JetStream API error codes the set-up acts on (nats-server's
// errors.json).
const (
	codeNoPeers             natsjs.ErrorCode = 10005 // no suitable peers for placement
	codeInsufficientRes     natsjs.ErrorCode = 10023 // insufficient resources
	codeMaxStreams          natsjs.ErrorCode = 10027 // maximum number of streams reached
	codeMemoryExceeded      natsjs.ErrorCode = 10028 // insufficient memory resources available
	codeStorageExceeded     natsjs.ErrorCode = 10047 // insufficient storage resources available
	codeInvalidConfig       natsjs.ErrorCode = 10052 // stream configuration invalid
	codeSubjectOverlap      natsjs.ErrorCode = 10065 // subjects overlap with an existing stream
	codeReplicasUnsupported natsjs.ErrorCode = 10074 // replicas > 1 not supported in non-clustered mode
	codeMaxBytesRequired    natsjs.ErrorCode = 10113 // account requires a stream config to have max bytes set
	codeNoLimits            natsjs.ErrorCode = 10120 // no JetStream default or applicable tiered limit present
	codeMaxStreamBytes      natsjs.ErrorCode = 10122 // stream max bytes exceeds account limit max stream bytes
)

// createError explains why creating the stream failed: a configuration
// error (ErrStreamConfig) with its fix, or err as it is, to be retried.
func createError(ctx context.Context, js natsjs.JetStream, spec StreamSpec, cfg natsjs.StreamConfig, err error) error {
	wrapped := fmt.Errorf("create stream %q with subjects %v: %w", spec.Name, cfg.Subjects, err)
	var api *natsjs.APIError
	if !errors.As(err, &api) {
		return wrapped
	}
	fix := ""
	switch api.ErrorCode {
	case codeSubjectOverlap:
		fix = "another stream takes some of the subjects already: remove them from it (nats stream edit OTHER --subjects ...), choose another --subject, or point --stream at the stream that has them"
		if other, lerr := js.StreamNameBySubject(ctx, spec.Template.Filter()); lerr == nil && other != "" {
			fix = fmt.Sprintf("stream %q takes %q already: use --stream %s (the relay adopts it: nats stream info %s), or remove the subjects from it", other, spec.Template.Filter(), other, other)
		} else if other, lerr := js.StreamNameBySubject(ctx, spec.DeadLetterSubject); lerr == nil && other != "" {
			fix = fmt.Sprintf("stream %q takes the dead-letter subject %q already: choose another --dead-letter-subject, or remove it from stream %s", other, spec.DeadLetterSubject, other)
		}
	case codeReplicasUnsupported:
		fix = "a single NATS server keeps one copy: use --stream-replicas 1, or a JetStream cluster"
	case codeNoPeers, codeInsufficientRes:
		// A server of the cluster may be down: an outage (setUpError).
		return wrapped
	case codeMaxStreams:
		fix = "the account may have no more streams: remove one it does not need (nats stream ls), raise the account's max_streams, or point --stream at an existing stream"
	case codeMaxBytesRequired, codeNoLimits:
		fix = "the account requires every stream to have a size limit: set --stream-max-bytes (within the account's limits: nats account info)"
	case codeMaxStreamBytes:
		fix = "lower --stream-max-bytes to the account's max stream bytes (nats account info), or raise that limit"
	case codeStorageExceeded, codeMemoryExceeded:
		fix = "the account or the servers cannot reserve --stream-max-bytes: lower it, or raise the account's storage limit (nats account info)"
	case codeInvalidConfig, natsjs.JSErrCodeBadRequest:
		fix = "check the --stream-* settings against the server's limits"
	case natsjs.JSErrCodeJetStreamNotEnabledForAccount, natsjs.JSErrCodeJetStreamNotEnabled:
		return notEnabled(err)
	default:
		if api.Code == 400 {
			fix = "check the --stream-* settings"
		} else {
			return wrapped
		}
	}
	return fmt.Errorf("%w: %w: %s", ErrStreamConfig, wrapped, fix)
}

// notEnabled is the configuration error of a server or an account
// without JetStream.
func notEnabled(err error) error {
	if errors.Is(err, natsjs.ErrJetStreamNotEnabledForAccount) {
		return fmt.Errorf("%w: %w: enable JetStream for the relay user's account (jetstream: enabled in its accounts block, or the operator's account JWT limits)", ErrStreamConfig, err)
	}
	return fmt.Errorf("%w: %w: enable JetStream on the server: start nats-server with -js (or a jetstream {} block in its config)", ErrStreamConfig, err)
}

// setUpError tells a configuration error apart from an outage in a
// failed set-up of the stream (looking it up, creating it): JetStream
// disabled on the server or for the account, or a request the user's
// permissions denied, are configuration errors; anything else is
// returned as it is (too few servers for the replicas explained).
func setUpError(nc *nats.Conn, spec StreamSpec, err error) error {
	var api *natsjs.APIError
	switch {
	case errors.Is(err, ErrStreamConfig):
		return err
	case errors.Is(err, natsjs.ErrJetStreamNotEnabledForAccount):
		return notEnabled(err)
	case errors.Is(err, natsjs.ErrJetStreamNotEnabled), errors.Is(err, nats.ErrNoResponders):
		// No responders: no server runs JetStream for this account, or
		// the cluster's meta leader is not there yet. The server says
		// which.
		if js, _ := nc.ConnectedServerJetStream(); !js && nc.IsConnected() {
			return notEnabled(err)
		}
		return err
	case errors.As(err, &api) && (api.ErrorCode == codeNoPeers || api.ErrorCode == codeInsufficientRes):
		// Servers of the cluster may be down or still meeting: wait, and
		// say what else it can be.
		return fmt.Errorf("%w (the cluster cannot place %d replicas now: servers down or still starting; if it has fewer servers, lower --stream-replicas)", err, max(spec.Replicas, 1))
	}
	if last := nc.LastError(); errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), "$JS.API") {
		return fmt.Errorf("%w: %w (%v): allow the relay's user to publish to $JS.API.> (or at least the STREAM.INFO, STREAM.CREATE, STREAM.MSG.GET, DIRECT.GET and CONSUMER requests of its stream) and to subscribe to _INBOX.>", ErrStreamConfig, last, err)
	}
	return err
}
