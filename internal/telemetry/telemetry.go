// Package telemetry sets up the relay's OpenTelemetry tracing from the
// standard OTEL_* environment variables. Tracing is off unless they ask
// for it: the relay runs on machines where a collector may not exist, and
// an exporter retrying a missing endpoint would cost CPU and log noise for
// nothing. When off, the relay gets no TracerProvider at all and its
// per-event path does no tracing work.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ShutdownTimeout bounds how long Shutdown waits for the last spans to
// reach the collector: the relay has drained by then, and an unreachable
// collector must not hold its exit.
const ShutdownTimeout = 5 * time.Second

// Tracing is the relay's tracing: a TracerProvider, or nothing when off.
type Tracing struct {
	provider *sdktrace.TracerProvider
}

// Provider returns the TracerProvider to pass to the relay; nil when
// tracing is off.
func (t *Tracing) Provider() trace.TracerProvider {
	if t == nil || t.provider == nil {
		return nil
	}
	return t.provider
}

// Shutdown exports the spans still queued and stops the exporter, within
// ShutdownTimeout. It does nothing when tracing is off.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.provider == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("flush traces to the OTLP endpoint: %w", err)
	}
	return nil
}

// Enabled reports whether the variables getenv reads turn tracing on:
// OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) with
// OTEL_TRACES_EXPORTER unset; never with OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none. Other exporters (console, zipkin) and the
// http/json protocol are refused rather than ignored.
func Enabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false, nil
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return false, nil
		}
	case "otlp":
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: the relay exports traces with otlp only (or none)", exp)
	}
	if _, err := protocol(getenv); err != nil {
		return false, err
	}
	return true, nil
}

// protocol returns the OTLP protocol asked for: http/protobuf (the
// default, a collector's port 4318) or grpc (4317).
func protocol(getenv func(string) string) (string, error) {
	p := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if p == "" {
		p = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch p = strings.TrimSpace(p); p {
	case "", "http/protobuf":
		return "http/protobuf", nil
	case "grpc":
		return p, nil
	}
	return "", fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s: the relay exports OTLP over http/protobuf or grpc", p)
}

// FromEnv returns the tracing the OTEL_* variables ask for (see Enabled);
// version is the relay's, for the service.version resource attribute.
// The exporter (endpoint, headers, TLS, timeout, compression), the batch
// span processor (OTEL_BSP_*), the sampler (OTEL_TRACES_SAMPLER,
// parent-based by default) and the resource (OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES) read their own variables.
func FromEnv(ctx context.Context, getenv func(string) string, version string) (*Tracing, error) {
	on, err := Enabled(getenv)
	if err != nil || !on {
		return &Tracing{}, err
	}
	exp, err := newExporter(ctx, getenv)
	if err != nil {
		return nil, err
	}
	res, err := newResource(ctx, version)
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracing{provider: tp}, nil
}

// newExporter returns the OTLP exporter of the protocol asked for. Neither
// connects here: spans wait in the batch processor until the collector
// answers, and a collector that is down never delays the relay's start.
func newExporter(ctx context.Context, getenv func(string) string) (sdktrace.SpanExporter, error) {
	p, err := protocol(getenv)
	if err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	if p == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("create the OTLP (%s) trace exporter: %w", p, err)
	}
	return exp, nil
}

// newResource names the relay's service: outbox-relay unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise (the
// environment is detected last, so it wins).
func newResource(ctx context.Context, version string) (*resource.Resource, error) {
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(semconv.ServiceName("outbox-relay"), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("build the trace resource from OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return res, nil
}
